"""The memory suite's kernels on the device: every kernel of a plan (:func:`module_kernels`:
the PTX of ``kernels.py`` and ``stream_kernels.py``), compiled as one module for the target
with their SASS checks (:class:`Kernels`, which also gives each result its provenance), and
the :class:`Launcher` that places chains in device memory and launches the chases; the
benchmarks (``suite.py``, ``bandwidth.py``, ``texture.py``) measure through it.
"""

from __future__ import annotations

import numpy as np

from gpudissect.arch.target import Target, ptx_needs
from gpudissect.device.args import Buf, Tex
from gpudissect.device.device import Device
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.ptx import Kernel, ptx_header
from gpudissect.store.db import Result
from gpudissect.suites.memory import kernels as gm
from gpudissect.suites.memory import stream_kernels as sk
from gpudissect.suites.memory.checks import MemCheck, check_region
from gpudissect.suites.memory.plan import Plan

TEX_KERNEL = "chase_tex"  # latency/tex and sweep/tex-*: a 1D u32 texture object over the chain


def module_kernels(header: str, plan: Plan) -> list[Kernel]:
    """All kernels of the suite (one module under ``header``); the constant chases hold the
    plan's chains."""
    ks = [gm.scatter_kernel(header)]
    ks += [gm.link_kernel(header), gm.l2probe_kernel(header)]
    ks += [gm.chase_global_kernel(op, header) for op in gm.GLOBAL_OPS]
    ks += [gm.chase_shared_kernel(header), gm.chase_shared_kernel(header, store=True),
           gm.chase_local_kernel(header), gm.chase_tex_kernel(header), gm.chase_stg_kernel(header)]
    ks += [gm.store_span_kernel(n, header) for n in gm.STORE_SPANS]
    for f in plan.const_footprints:
        ch = gm.build_chain(f, plan.const_spacing(f), "random", seed=plan.seed)
        ks.append(gm.chase_const_kernel(ch, header, f"{f}"))
    ks += [gm.bandwidth_kernel(k, header) for k in gm.BW_KINDS]
    ks += sk.kernels(header, plan.bw_widths, plan.bw_ilps) + gm.window_kernels(header)
    ks += [gm.bank_kernel(b, header) for b in gm.BANK_WIDTHS]
    return ks


class Kernels:
    """All kernels of the suite, compiled as one module for the target, with their SASS checks."""

    def __init__(self, target: Target, plan: Plan):
        ks = module_kernels(ptx_header(target.ptx_isa, target.arch), plan)
        # what the architecture cannot compile is left out (and its measurements with it)
        self.left_out = {k.name: lack for k in ks if (lack := target.lacks(ptx_needs(k.ptx)))}
        ks = [k for k in ks if k.name not in self.left_out]
        self.kernels = {k.name: k for k in ks}
        built = build_module(ks, target.arch)
        self.built: dict[str, Built] = {n: b for n, b in built.items() if isinstance(b, Built)}
        self.cubin = next(iter(self.built.values())).cubin
        self.checks: dict[str, MemCheck] = {
            n: check_region(self.kernels[n].meta["path"], b.region, b.arch) for n, b in self.built.items()}

    def texts(self, name: str) -> dict[str, tuple[str, str]]:
        b = self.built.get(name)
        return b.texts() if b else {}

    def result(self, name: str, **kw) -> Result:
        """A Result carrying the kernel's provenance (hashes, SASS of the checked loads) and
        the SASS-check flags."""
        b = self.built.get(name)
        chk = self.checks.get(name)
        flags = list(kw.pop("flags", []))
        if chk is not None and not chk.ok:
            flags += chk.flags()
            kw["value"] = None
        return Result(flags=flags, sass=sorted(chk.counts) if chk else [],
                      ptx_hash=b.ptx_hash if b else None, sass_hash=b.sass_hash if b else None,
                      strategy="memory", cls="memory", **kw)


def reported_l2_bytes(dev: Device) -> int | None:
    """The L2 size the driver reports (cuDeviceGetAttribute L2_CACHE_SIZE), read in this
    process (an attribute query needs no context); None for fake devices or where it cannot
    be read. Bounds the cache sweeps and is compared with the measured capacity, never
    used as a measurement."""
    info = getattr(dev, "info", None)
    if info is None or "fake" in f"{info.driver} {info.uuid}".lower():
        return None
    try:
        from cuda.bindings import driver as cu

        if int(cu.cuInit(0)[0]):
            return None
        err, d = cu.cuDeviceGet(int(info.index))
        if int(err):
            return None
        err, v = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d)
        return int(v) if not int(err) and int(v) > 0 else None
    except Exception:
        return None


class Launcher:
    """The suite's kernels on one device: chains placed, chases and streams launched; it
    remembers the largest chain buffer held (free memory counts it as available)."""

    def __init__(self, dev: Device, k: Kernels, plan: Plan):
        self.dev, self.k, self.plan = dev, k, plan
        self.held = 0  # bytes of the largest chain buffer allocated so far
        self.sm = int(dev.info.sm_count)
        self.l2_reported = reported_l2_bytes(dev)

    # --- chases
    def place(self, chain: gm.Chain) -> None:
        """Upload the validated chain and turn it into addresses in the 'chain' buffer."""
        n = chain.nodes
        self.dev.launch(self.k.cubin, "scatter", min(4096, max(1, n // 256)), 256,
                        [Buf("chain", nbytes=chain.footprint), Buf("next", data=chain.next),
                         np.uint64(n), np.uint64(chain.spacing)])
        self.held = max(self.held, chain.footprint)

    def chain_arg(self, kernel: str, chain: gm.Chain) -> Buf | Tex:
        """Put the validated chain where ``kernel`` follows it: addresses in the 'chain'
        buffer (global chases, :meth:`place`) or element indices in a texture (``chase_tex``)."""
        if kernel == TEX_KERNEL:
            return Tex(Buf("texchain", data=gm.element_indices(chain)))
        self.place(chain)
        return Buf("chain", nbytes=chain.footprint)

    def link(self, offs: np.ndarray, nbytes: int) -> None:
        """Link the validated offset chain (:func:`gm.offset_chain`) in the 'chain' buffer."""
        n = int(offs.size)
        self.dev.launch(self.k.cubin, "link", min(4096, max(1, n // 256)), 256,
                        [Buf("chain", nbytes=nbytes), Buf("offs", data=offs), np.uint64(n),
                         np.uint64(nbytes - 8)])
        self.held = max(self.held, nbytes)

    def chase(self, kernel: str, nbytes: int, warm: int, iters: int, grid: int = 1,
              launches: int = 1, chain_buf: Buf | Tex | None = None) -> np.ndarray:
        """Cycles per dependent load, shape (launches, grid), and smids (grid,)."""
        args = [chain_buf or Buf("chain", nbytes=nbytes), Buf("out", nbytes=24 * grid, read=True),
                np.uint32(warm), np.uint32(iters)]
        vals, smid = [], None
        for _ in range(launches):
            run = self.dev.launch(self.k.cubin, kernel, grid, 1, args)
            out = np.asarray(run.outputs["out"], dtype=np.uint64)[: 3 * grid].reshape(grid, 3)
            vals.append(out[:, 0].astype(float) / (iters * gm.UNROLL))
            smid = out[:, 2].astype(int)
        return np.array(vals), smid

    def limit(self) -> int:
        return int(self.dev.free_memory()) + self.held

    def chain(self, footprint: int, spacing: int, order: str, seed: int = 0) -> gm.Chain:
        sp = spacing
        while footprint // sp > self.plan.max_nodes:
            sp *= 2
        return gm.build_chain(footprint, sp, order, seed=self.plan.seed + seed, limit=self.limit())
