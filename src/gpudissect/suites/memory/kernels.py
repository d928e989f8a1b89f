"""PTX kernels of the memory suite: pointer chases, texture-fetch windows, the L2 flush's store
stream, bank-conflict probes (the bandwidth benchmarks' stream kernels are in
``stream_kernels.py``).

Every timed kernel holds its timed region between two ``%clock64`` reads
(:mod:`gpudissect.kernel.timing`), so :func:`gpudissect.kernel.region.find_region` finds it and
:mod:`gpudissect.suites.memory.checks` can check that the region holds exactly the intended
load kind. Every generator takes the module header (:func:`gpudissect.kernel.ptx.ptx_header`
of the run's target) and returns a :class:`gpudissect.kernel.ptx.Kernel`.

Safety of the chases: the host builds a chain as a permutation ``next[i]`` of node indices
and validates it (:func:`build_chain`) before upload; the ``scatter`` kernel turns it into
in-buffer addresses (``buf + next[i] * spacing``, with ``next`` clamped to ``n - 1`` on the
device as a second guard). The timed loop then follows pure pointers (``LDG R, [R]``), with
no masking instruction on the dependence path, and can only reach addresses the scatter
kernel wrote, all inside the buffer.

Kernel ABIs (parameters in order):

* ``scatter(buf u64, next u64, n u64, spacing u64)``: ``buf[i*spacing] = buf + next[i]*spacing``
* ``link(buf u64, offs u64, n u64, lim u64)``: ``buf[offs[i]] = buf + offs[(i+1) mod n]`` (an
  offset chain, :func:`offset_chain`: the TLB study's page chains)
* ``l2probe(chain u64, out u64, warm u32, iters u32, offs u64, lim u64)``: block b chases a
  one-line self-loop at ``chain + offs[b]`` with ``ld.global.cg`` (the per-SM L2 map)
* ``chase_<path>(chain u64, out u64, warm u32, iters u32)``: one thread per block follows
  ``warm`` links untimed, then ``iters * UNROLL`` links timed; writes (cycles, sink, smid)
  to ``out[3 * ctaid]``. Shared/local paths take the chain as u32 byte offsets
  (``chain[i] = next byte offset``) and copy it into their space first (``n`` u32 words:
  the ``warm`` parameter doubles as the word count there, every word is visited once warm).
  ``chase_tex`` takes a texture object handle instead of ``chain`` (u32 elements holding the
  next node's element index, :func:`element_indices`) and returns the final index as sink.
* ``tex_win_<kind>(tex u64, out u64, warm u32, zero u32)``: ``UNROLL`` dependent texture
  fetches, each timed between two 32-bit clock reads, after ``warm`` untimed ones; writes
  (region cycles, sink, smid, then the UNROLL windows) as u64 to ``out`` (the texture-method
  check, ``texture.py``).
* ``bw_st_cg(buf u64, out u64, slice u32, block_stride u32, reps u32)``: each block writes
  ``slice`` 16-byte vectors starting at ``ctaid * block_stride`` vectors, ``reps`` times (the
  L2 flush of the stride sweep; the bandwidth benchmarks' kernels are in ``stream_kernels.py``).
* ``bank_w<bits>(out u64, stride u32, iters u32)``: one warp, lane address
  ``lane * stride`` bytes in shared memory holding itself (a self-loop), timed dependent loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import timed

UNROLL = 16
GLOBAL_OPS = ("ca", "cg", "cv", "lu", "nc")
SMEM_CHASE_BYTES = 16 * 1024
LOCAL_CHASE_BYTES = 4 * 1024
BANK_SMEM_BYTES = 32 * 1024


class ChainError(ValueError):
    """A chain that is not a single in-bounds cycle, or a footprint that cannot be served."""


@dataclass
class Chain:
    """A pointer-chase chain: ``next[i]`` is the node after node i; node i sits at byte
    ``i * spacing`` of a buffer of ``footprint`` bytes."""

    next: np.ndarray  # uint32 node indices
    spacing: int
    footprint: int
    order: str  # random | strided

    @property
    def nodes(self) -> int:
        return int(self.next.size)

    def byte_offsets(self, unit: int = 1) -> np.ndarray:
        """The chain as u32 byte offsets of the next node, stored at each node's word
        (the form shared/local/constant chases use), one word per 4 bytes of footprint;
        divided by ``unit`` (4: u32 element indices, see :func:`element_indices`)."""
        if self.spacing % 4:
            raise ChainError("spacing must be a multiple of 4 for a u32 chain")
        words = np.zeros(self.footprint // 4, dtype=np.uint32)
        words[np.arange(self.nodes) * (self.spacing // 4)] = self.next * (self.spacing // unit)
        return words


def build_chain(footprint: int, spacing: int, order: str = "random", seed: int = 0,
                limit: int | None = None) -> Chain:
    """A single cycle through every node of a ``footprint``-byte buffer, nodes ``spacing``
    bytes apart, visited in random or sequential (strided) order. Refuses footprints above
    ``limit`` bytes (free device memory) with a clear message."""
    if spacing < 8 or spacing % 8:
        raise ChainError(f"spacing {spacing} B: must be a multiple of 8 (pointer size)")
    if footprint < 2 * spacing:
        raise ChainError(f"footprint {footprint} B holds fewer than 2 nodes of {spacing} B")
    if limit is not None and footprint > limit:
        raise ChainError(f"footprint {footprint / 2**20:.1f} MiB exceeds the free device memory "
                         f"({limit / 2**20:.1f} MiB available): refused")
    n = footprint // spacing
    if n >= 2**32:
        raise ChainError(f"{n} nodes: more than a u32 index holds")
    if order == "random":
        visit = np.random.default_rng(seed).permutation(n).astype(np.uint32)
    elif order == "strided":
        visit = np.arange(n, dtype=np.uint32)
    else:
        raise ChainError(f"unknown chain order '{order}' (random, strided)")
    nxt = np.empty(n, dtype=np.uint32)
    nxt[visit] = np.roll(visit, -1)
    chain = Chain(nxt, spacing, n * spacing, order)
    validate_chain(chain, visit)
    return chain


def validate_chain(chain: Chain, visit: np.ndarray) -> None:
    """Raise ChainError unless ``next`` is one cycle through all nodes, all inside the buffer.
    ``visit`` (the order of the walk) is the certificate: it must be a permutation of the
    nodes and ``next`` must map each visited node to the following one, cyclically."""
    n = chain.nodes
    nxt = chain.next
    if nxt.dtype != np.uint32 or n < 2 or visit.size != n:
        raise ChainError("chain must be a uint32 array of >= 2 nodes with its visit order")
    if int(nxt.max()) >= n or int(visit.max()) >= n:
        raise ChainError("chain points outside the buffer")
    if (n - 1) * chain.spacing + 8 > chain.footprint:
        raise ChainError("last node does not fit in the buffer")
    if not (np.bincount(visit, minlength=n) == 1).all():
        raise ChainError("visit order is not a permutation of the nodes")
    if not np.array_equal(nxt[visit], np.roll(visit, -1)):
        raise ChainError("chain is not a single cycle through all nodes")


def _kernel(name: str, header: str, entry: str, measure: str, meta: dict) -> Kernel:
    """One kernel of the suite (``length``: the ``UNROLL`` accesses per trip of a chase's or
    bank probe's timed loop)."""
    return Kernel(name, header, entry, variant=name, measure=measure, length=UNROLL, meta=meta)


# grid-stride loop set-up: %i = global thread index, %st = threads in the grid
_GRID_STRIDE = """\
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mad.wide.u32 %i, %r0, %r1, 0;
    cvt.u64.u32 %t, %r2;
    add.u64 %i, %i, %t;
    mov.u32 %r3, %nctaid.x;
    mul.wide.u32 %st, %r3, %r1;
"""


def scatter_kernel(header: str) -> Kernel:
    e = """
.visible .entry scatter(.param .u64 buf, .param .u64 nxt, .param .u64 n, .param .u64 spacing)
{
    .reg .u64 %b, %x, %n, %s, %i, %a, %v, %st, %t;
    .reg .u32 %r<4>;
    .reg .pred %p;
    ld.param.u64 %b, [buf];
    ld.param.u64 %x, [nxt];
    ld.param.u64 %n, [n];
    ld.param.u64 %s, [spacing];
{_GRID_STRIDE}L:
    setp.ge.u64 %p, %i, %n;
    @%p bra D;
    shl.b64 %a, %i, 2;
    add.u64 %a, %x, %a;
    ld.global.u32 %r0, [%a];
    cvt.u64.u32 %v, %r0;
    sub.u64 %t, %n, 1;
    min.u64 %v, %v, %t;
    mul.lo.u64 %v, %v, %s;
    add.u64 %v, %b, %v;
    mul.lo.u64 %a, %i, %s;
    add.u64 %a, %b, %a;
    st.global.u64 [%a], %v;
    add.u64 %i, %i, %st;
    bra L;
D:
    ret;
}
"""
    e = e.replace("{_GRID_STRIDE}", _GRID_STRIDE)
    return _kernel("scatter", header, e, "setup", {"kind": "setup"})


def _tail(sink: str) -> str:
    """Write (cycles, sink, smid) to out[3*ctaid] (thread 0 of each block)."""
    return f"""
    sub.u64 %t1, %t1, %t0;
    ld.param.u64 %o, [out];
    mov.u32 %c, %ctaid.x;
    mul.wide.u32 %oo, %c, 24;
    add.u64 %o, %o, %oo;
    st.global.u64 [%o], %t1;
    st.global.u64 [%o+8], {sink};
    mov.u32 %c, %smid;
    cvt.u64.u32 %oo, %c;
    st.global.u64 [%o+16], %oo;
    ret;
}}
"""


def _loop(body: str) -> str:
    """``%n`` trips of the unrolled ``body``, timed between two %clock64 reads (%t0, %t1)."""
    trips = ["T:", body, "    sub.u32 %n, %n, 1;", "    setp.ne.u32 %q, %n, 0;", "    @%q bra T;"]
    return "\n".join(timed(trips, "%t0", "%t1", "    "))


def _timed(body: str, sink: str) -> str:
    """The timed part of every chase: ``iters`` rounds of the unrolled ``body`` (:func:`_loop`),
    then the tail; ``sink``: the chase register (a u32 one is widened to %x)."""
    widen = f"    cvt.u64.u32 %x, {sink};\n" if sink != "%p" else ""
    return ("    ld.param.u32 %n, [iters];\n" + _loop(body) + "\n" + widen
            + _tail("%x" if widen else sink))


_TAIL_E = _tail("%x").replace("ret;", "E:\n    ret;")


def chase_global_kernel(op: str, header: str) -> Kernel:
    if op not in GLOBAL_OPS:
        raise ValueError(f"unknown cache operator '{op}' ({', '.join(GLOBAL_OPS)})")
    step = f"    ld.global.{op}.u64 %p, [%p];"
    e = _global_chase_entry(f"chase_{op}", step, "\n".join(step for _ in range(UNROLL)))
    return _kernel(f"chase_{op}", header, e, "chase", {"path": f"ld.global.{op}", "expect": "global"})


def _global_chase_entry(name: str, step: str, body: str) -> str:
    """The entry of a chase through global memory: ``warm`` untimed ``step``s from the chain's
    start, then the timed region ``body`` (the pointer ``%p`` carries the chain)."""
    return f"""
.visible .entry {name}(.param .u64 chain, .param .u64 out, .param .u32 warm, .param .u32 iters)
{{
    .reg .u64 %p, %t0, %t1, %o, %oo;
    .reg .u32 %n, %c;
    .reg .pred %q;
    ld.param.u64 %p, [chain];
    ld.param.u32 %n, [warm];
W:
    setp.eq.u32 %q, %n, 0;
    @%q bra WD;
{step}
    sub.u32 %n, %n, 1;
    bra W;
WD:
{_timed(body, '%p')}"""


def _onchip_chase(name: str, path: str, expect: str, space: str, nbytes: int, step: str,
                  header: str) -> Kernel:
    """A chase through a per-block ``.shared`` or per-thread ``.local`` array: the host chain
    (u32 byte offsets) is copied in, each offset masked into the array and rebased, so no
    address outside the array can be formed; a warm pass, then the timed unrolled loop."""
    body = "\n".join(step for _ in range(UNROLL))
    b, a = ("%sb", "%sa") if space == "shared" else ("%lb", "%la")
    buf = "sbuf" if space == "shared" else "lbuf"
    barrier = "    bar.sync 0;\n" if space == "shared" else ""
    e = f"""
.visible .entry {name}(.param .u64 chain, .param .u64 out, .param .u32 warm, .param .u32 iters)
{{
    .reg .u64 %g, %t0, %t1, %o, %oo, %x;
    .reg .u32 %n, %c, %i, %a, %v, {b}, {a};
    .reg .pred %q;
    .{space} .align 16 .b8 {buf}[{nbytes}];
    ld.param.u64 %g, [chain];
    ld.param.u32 %n, [warm];
    mov.u32 {b}, {buf};
    mov.u32 %i, 0;
C:
    setp.ge.u32 %q, %i, %n;
    @%q bra CD;
    mul.wide.u32 %x, %i, 4;
    add.u64 %x, %g, %x;
    ld.global.u32 %v, [%x];
    and.b32 %v, %v, {nbytes - 4};
    add.u32 %v, %v, {b};
    shl.b32 {a}, %i, 2;
    add.u32 {a}, {a}, {b};
    st.{space}.u32 [{a}], %v;
    add.u32 %i, %i, 1;
    bra C;
CD:
{barrier}    mov.u32 %a, {b};
    mov.u32 %i, 0;
W:
    setp.ge.u32 %q, %i, %n;
    @%q bra WD;
    ld.{space}.u32 %a, [%a];
    add.u32 %i, %i, 1;
    bra W;
WD:
{_timed(body, '%a')}"""
    return _kernel(name, header, e, "chase", {"path": path, "expect": expect})


def chase_shared_kernel(header: str, store: bool = False) -> Kernel:
    """Shared-memory chase (``store=False``) or store->load round trip through one shared
    word (``store=True``: ``st.volatile.shared [a], a; ld.volatile.shared a, [a]``)."""
    if store:
        step = "    st.volatile.shared.u32 [%a], %a;\n    ld.volatile.shared.u32 %a, [%a];"
        return _onchip_chase("chase_sts", "st.shared+ld.shared", "shared", "shared",
                             SMEM_CHASE_BYTES, step, header)
    return _onchip_chase("chase_lds", "ld.shared", "shared", "shared", SMEM_CHASE_BYTES,
                         "    ld.shared.u32 %a, [%a];", header)


def chase_local_kernel(header: str) -> Kernel:
    return _onchip_chase("chase_ldl", "ld.local", "local", "local", LOCAL_CHASE_BYTES,
                         "    ld.local.u32 %a, [%a];", header)


TEX_STEP = "    tex.1d.v4.u32.s32 {%a, %b, %c, %d}, [%tx, {%a}];"
# the untimed warm-up of the texture kernels: %n dependent fetches before the timed region
TEX_WARM = f"""W:
    setp.eq.u32 %q, %n, 0;
    @%q bra WD;
{TEX_STEP}
    sub.u32 %n, %n, 1;
    bra W;
WD:"""


def chase_tex_kernel(header: str) -> Kernel:
    """Texture chase (unified mode: the texture object handle is the first, .u64, parameter):
    a 1D integer texture over linear memory whose element ``i`` holds the element index of
    the next node (:func:`element_indices`). A fetch outside the texture returns 0 (node 0)
    rather than faulting, so no index can reach memory outside the buffer."""
    body = "\n".join(TEX_STEP for _ in range(UNROLL))
    e = f"""
.visible .entry chase_tex(.param .u64 tex, .param .u64 out, .param .u32 warm, .param .u32 iters)
{{
    .reg .u64 %tx, %t0, %t1, %o, %oo, %x;
    .reg .u32 %n, %c, %a, %b, %d;
    .reg .pred %q;
    ld.param.u64 %tx, [tex];
    ld.param.u32 %n, [warm];
    mov.u32 %a, 0;
{TEX_WARM}
{_timed(body, '%a')}"""
    return _kernel("chase_tex", header, e, "chase", {"path": "tex.1d", "expect": "texture"})


def element_indices(chain: Chain) -> np.ndarray:
    """The chain as u32 ELEMENT indices of the next node (what a u32 texture fetch takes),
    stored at each node's element: :meth:`Chain.byte_offsets` divided by 4."""
    return chain.byte_offsets(unit=4)


WINDOW_KINDS = ("open", "used")  # the texture-method check (texture.py)
WINDOW_WORDS = 3 + UNROLL  # u64 a window kernel writes


def window_kernel(kind: str, header: str) -> Kernel:
    """UNROLL dependent texture fetches, each between two 32-bit clock reads; ``used``: the
    fetched index feeds an add before the end read."""
    if kind not in WINDOW_KINDS:
        raise ValueError(f"unknown window kind '{kind}' ({', '.join(WINDOW_KINDS)})")
    use = "    add.u32 %a, %a, %z;\n" if kind == "used" else ""
    body = []
    for i in range(UNROLL):
        body += [f"    mov.u32 %s{i}, %clock;", TEX_STEP, use.rstrip("\n"),
                 f"    mov.u32 %e{i}, %clock;", f"    sub.u32 %e{i}, %e{i}, %s{i};"]
    region = "\n".join(timed([x for x in body if x], "%t0", "%t1", "    "))
    stores = "\n".join(f"    cvt.u64.u32 %x, %e{i};\n    st.global.u64 [%o+{8 * (3 + i)}], %x;"
                       for i in range(UNROLL))
    e = f"""
.visible .entry tex_win_{kind}(.param .u64 tex, .param .u64 out, .param .u32 warm, .param .u32 zero)
{{
    .reg .u64 %tx, %t0, %t1, %o, %x;
    .reg .u32 %n, %z, %a, %b, %c, %d, %s<{UNROLL}>, %e<{UNROLL}>;
    .reg .pred %q;
    ld.param.u64 %tx, [tex];
    ld.param.u32 %n, [warm];
    ld.param.u32 %z, [zero];
    mov.u32 %a, 0;
{TEX_WARM}
{region}
    sub.u64 %t1, %t1, %t0;
    ld.param.u64 %o, [out];
    st.global.u64 [%o], %t1;
    cvt.u64.u32 %x, %a;
    st.global.u64 [%o+8], %x;
    mov.u32 %n, %smid;
    cvt.u64.u32 %x, %n;
    st.global.u64 [%o+16], %x;
{stores}
    ret;
}}
"""
    return Kernel(f"tex_win_{kind}", header, e, variant=f"texmethod/{kind}", measure="latency",
                  length=UNROLL, meta={"path": "tex.1d.window", "expect": "texture", "kind": kind})


def window_kernels(header: str) -> list[Kernel]:
    return [window_kernel(k, header) for k in WINDOW_KINDS]


def chase_const_kernel(chain: Chain, header: str, tag: str) -> Kernel:
    """Constant-memory chase: the chain (u32 byte offsets, validated on the host) is the
    initializer of a module-level ``.const`` array, so no other value can ever be loaded."""
    words = chain.byte_offsets()
    if words.nbytes > 64 * 1024:
        raise ChainError("constant chains are limited to 64 KiB (the constant bank)")
    init = ", ".join(str(int(w)) for w in words)
    arr = f"cchain_{tag}"
    body = "\n".join("    add.u32 %v, %cb, %a;\n    ld.const.u32 %a, [%v];"
                     for _ in range(UNROLL))
    e = f"""
.const .align 4 .u32 {arr}[{words.size}] = {{{init}}};
.visible .entry chase_ldc_{tag}(.param .u64 chain, .param .u64 out, .param .u32 warm, .param .u32 iters)
{{
    .reg .u64 %t0, %t1, %o, %oo, %x;
    .reg .u32 %n, %c, %a, %v, %cb;
    .reg .pred %q;
    mov.u32 %cb, {arr};
    ld.param.u32 %n, [warm];
    mov.u32 %a, 0;
W:
    setp.eq.u32 %q, %n, 0;
    @%q bra WD;
    add.u32 %v, %cb, %a;
    ld.const.u32 %a, [%v];
    sub.u32 %n, %n, 1;
    bra W;
WD:
{_timed(body, '%a')}"""
    return _kernel(f"chase_ldc_{tag}", header, e, "chase",
                   {"path": "ld.const", "expect": "constant", "footprint": chain.footprint})


# --- offset chains: nodes at arbitrary (host-validated) byte offsets of one buffer

ALIGN_MASK = "0xFFFFFFFFFFFFFFF8"  # clears the low 3 bits: every node is a u64 slot


def offset_chain(offsets, nbytes: int, limit: int | None = None) -> np.ndarray:
    """Validate the node byte offsets of a chain visited in the given order (node i links to
    node i+1, the last to the first; a single node links to itself): unique, 8-byte aligned,
    inside a buffer of ``nbytes``, the first at offset 0 (where the chases start). Returns
    them as the u64 array :func:`link_kernel` takes."""
    o = np.asarray(offsets, dtype=np.int64)
    if o.ndim != 1 or o.size < 1:
        raise ChainError("an offset chain needs at least one node")
    if limit is not None and nbytes > limit:
        raise ChainError(f"buffer of {nbytes / 2**20:.1f} MiB exceeds the free device memory "
                         f"({limit / 2**20:.1f} MiB available): refused")
    if int(o[0]) != 0:
        raise ChainError("the first node of an offset chain must sit at offset 0")
    if (o % 8).any() or int(o.min()) < 0 or int(o.max()) + 8 > nbytes:
        raise ChainError("offset chain node outside the buffer or not 8-byte aligned")
    if np.unique(o).size != o.size:
        raise ChainError("offset chain visits a node twice")
    return o.astype(np.uint64)


def page_chain_offsets(pages: int, stride: int, region: int, lines: int, seed: int = 0,
                       shift: int = 0) -> np.ndarray:
    """Node offsets of a translation (TLB) chain: ``pages`` regions ``stride`` bytes apart,
    visited ``lines`` rounds in one fixed random page order (so the distance between two
    visits of a page is exactly ``pages`` pages, as in a cycle); round j touches another
    64-byte line inside the first ``region`` bytes of each page, so the chain holds
    ``pages * lines`` distinct lines (their L2 slices average out) while its translation
    working set stays ``pages`` pages. An odd per-page step (4160 B) spreads the lines over
    cache sets; ``shift`` (a multiple of 64 below region / lines) moves every line but the
    first (another sample of lines for a repeat)."""
    if pages < 1 or lines < 1 or stride < region or region // lines < 64:
        raise ChainError(f"page chain: {pages} pages, {lines} lines of a {region}-byte region, "
                         f"stride {stride}: not a valid layout")
    if shift % 64 or not 0 <= shift < region // lines:
        raise ChainError(f"page chain shift {shift}: a multiple of 64 below {region // lines}")
    rng = np.random.default_rng(seed)
    k = np.concatenate([[0], 1 + rng.permutation(pages - 1)]).astype(np.int64)
    step = region // lines
    rows = [k * stride + (k * 4160 + j * step + shift) % region // 64 * 64 for j in range(lines)]
    o = np.concatenate(rows)
    o[0] = 0  # the chases start at the buffer's first byte
    return o


def link_kernel(header: str) -> Kernel:
    """``link(buf, offs, n, lim)``: ``buf[offs[i]] = buf + offs[(i + 1) mod n]`` for every
    node (the offsets validated on the host by :func:`offset_chain`; clamped to ``lim`` and
    8-byte aligned here as a second guard)."""
    e = """
.visible .entry link(.param .u64 buf, .param .u64 offs, .param .u64 n, .param .u64 lim)
{
    .reg .u64 %b, %x, %n, %l, %i, %j, %a, %v, %w, %st, %t;
    .reg .u32 %r<4>;
    .reg .pred %p;
    ld.param.u64 %b, [buf];
    ld.param.u64 %x, [offs];
    ld.param.u64 %n, [n];
    ld.param.u64 %l, [lim];
{_GRID_STRIDE}L:
    setp.ge.u64 %p, %i, %n;
    @%p bra D;
    add.u64 %j, %i, 1;
    setp.ge.u64 %p, %j, %n;
    @%p mov.u64 %j, 0;
    shl.b64 %a, %j, 3;
    add.u64 %a, %x, %a;
    ld.global.u64 %v, [%a];
    min.u64 %v, %v, %l;
    and.b64 %v, %v, {MASK};
    add.u64 %v, %b, %v;
    shl.b64 %a, %i, 3;
    add.u64 %a, %x, %a;
    ld.global.u64 %w, [%a];
    min.u64 %w, %w, %l;
    and.b64 %w, %w, {MASK};
    add.u64 %w, %b, %w;
    st.global.u64 [%w], %v;
    add.u64 %i, %i, %st;
    bra L;
D:
    ret;
}
"""
    e = e.replace("{_GRID_STRIDE}", _GRID_STRIDE).replace("{MASK}", ALIGN_MASK)
    return _kernel("link", header, e, "setup", {"kind": "setup"})


def l2probe_kernel(header: str) -> Kernel:
    """Per-SM L2 probe ``l2probe(buf, out, warm, iters, offs, lim)``: block b takes the line
    at ``buf + offs[b]`` (host-validated; clamped to ``lim`` and 8-byte aligned here), stores
    the line's own address into it (a one-line self-loop), follows it ``warm`` times
    untimed and ``iters * UNROLL`` times timed with ``ld.global.cg`` (L1 bypassed: every
    load is an L2 access); writes (cycles, sink, smid) to ``out[3 * ctaid]``."""
    body = "\n".join("    ld.global.cg.u64 %p, [%p];" for _ in range(UNROLL))
    e = f"""
.visible .entry l2probe(.param .u64 chain, .param .u64 out, .param .u32 warm, .param .u32 iters, .param .u64 offs, .param .u64 lim)
{{
    .reg .u64 %p, %t0, %t1, %o, %oo, %a, %l;
    .reg .u32 %n, %c;
    .reg .pred %q;
    ld.param.u64 %p, [chain];
    ld.param.u64 %a, [offs];
    ld.param.u64 %l, [lim];
    mov.u32 %c, %ctaid.x;
    mul.wide.u32 %oo, %c, 8;
    add.u64 %a, %a, %oo;
    ld.global.u64 %a, [%a];
    min.u64 %a, %a, %l;
    and.b64 %a, %a, {ALIGN_MASK};
    add.u64 %p, %p, %a;
    st.global.u64 [%p], %p;
    ld.param.u32 %n, [warm];
W:
    setp.eq.u32 %q, %n, 0;
    @%q bra WD;
    ld.global.cg.u64 %p, [%p];
    sub.u32 %n, %n, 1;
    bra W;
WD:
{_timed(body, '%p')}"""
    return _kernel("l2probe", header, e, "chase", {"path": "ld.global.cg", "expect": "global"})


BW_KINDS = {
    # name: (memory access PTX for vector j at address %a<j> / %s<j>, expected class); the
    # store stream is the L2 flush (suite._flush); bandwidth is measured by bandwidth.py
    "st_cg": ("st.global.cg.v4.u32 [%a{j}], {{%w, %w, %w, %w}};", "global"),
}
BW_SMEM_BYTES = 32 * 1024
BW_UNROLL = 4  # vectors in flight per thread and loop trip: slice must be a multiple of 4*block


def bandwidth_kernel(kind: str, header: str) -> Kernel:
    """Streaming kernel (timed by events; its %clock64 pair only delimits the SASS check).
    Thread t of a block touches vectors t + k*ntid of its block's slice, BW_UNROLL at a time."""
    access, cls = BW_KINDS[kind]
    shared = cls == "shared"
    load = not kind.startswith("st")
    lines = []
    for j in range(BW_UNROLL):
        lines.append(f"    add.u32 %i{j}, %i, {'%nt' if j else '0'};" if j == 0 else
                     f"    add.u32 %i{j}, %i{j - 1}, %nt;")
        if shared:
            lines.append(f"    and.b32 %s{j}, %i{j}, {BW_SMEM_BYTES // 16 - 1};")
            lines.append(f"    shl.b32 %s{j}, %s{j}, 4;")
            lines.append(f"    add.u32 %s{j}, %s{j}, %sb;")
        else:
            lines.append(f"    mul.wide.u32 %x, %i{j}, 16;")
            lines.append(f"    add.u64 %a{j}, %b, %x;")
    for j in range(BW_UNROLL):
        lines.append("    " + access.format(j=j))
    if load:
        for j in range(BW_UNROLL):
            lines.append(f"    xor.b32 %acc, %acc, %v{j}0; xor.b32 %acc, %acc, %v{j}1;")
            lines.append(f"    xor.b32 %acc, %acc, %v{j}2; xor.b32 %acc, %acc, %v{j}3;")
    body = "\n".join(lines)
    vregs = ", ".join(f"%v{j}{c}" for j in range(BW_UNROLL) for c in range(4))
    idx = ", ".join(f"%i{j}, %s{j}" for j in range(BW_UNROLL))
    addr = ", ".join(f"%a{j}" for j in range(BW_UNROLL))
    smem = f".shared .align 16 .b8 bwbuf[{BW_SMEM_BYTES}];" if shared else ""
    passes = f"""R:
    mov.u32 %i, %th;
L:
    setp.ge.u32 %q, %i, %sl;
    @%q bra LD;
{body}
    add.u32 %i, %i, %nt4;
    bra L;
LD:
    sub.u32 %r, %r, 1;
    setp.ne.u32 %q, %r, 0;
    @%q bra R;"""
    stream = "\n".join(timed([passes], "%t0", "%t1", "    "))
    e = f"""
.visible .entry bw_{kind}(.param .u64 buf, .param .u64 out, .param .u32 slice, .param .u32 bstride, .param .u32 reps)
{{
    .reg .u64 %b, %t0, %t1, %o, %oo, %x, {addr};
    .reg .u32 {vregs}, {idx};
    .reg .u32 %w, %acc, %i, %r, %sl, %bs, %nt, %nt4, %th, %c, %sb;
    .reg .pred %q;
    {smem}
    ld.param.u64 %b, [buf];
    ld.param.u32 %sl, [slice];
    ld.param.u32 %bs, [bstride];
    ld.param.u32 %r, [reps];
    mov.u32 %th, %tid.x;
    mov.u32 %nt, %ntid.x;
    shl.b32 %nt4, %nt, 2;
    mov.u32 %c, %ctaid.x;
    mul.lo.u32 %c, %c, %bs;
    mul.wide.u32 %x, %c, 16;
    add.u64 %b, %b, %x;
    mov.u32 %w, %th;
    mov.u32 %acc, 0;
    {'mov.u32 %sb, bwbuf;' if shared else ''}
{stream}
    cvt.u64.u32 %x, %acc;
    setp.ne.u32 %q, %th, 0;
    @%q bra E;
{_TAIL_E}"""
    return _kernel(f"bw_{kind}", header, e, "bandwidth", {"path": kind, "expect": cls, "stream": True})


BANK_WIDTHS = {32: ("u32", "%a"), 64: ("v2.u32", "{%a, %b}"), 128: ("v4.u32", "{%a, %b, %c2, %d}")}
# every component feeds the chain (else ptxas narrows the access); all words hold the address
BANK_FOLD = {32: "", 64: "\n    or.b32 %a, %a, %b;",
             128: "\n    or.b32 %a, %a, %b;\n    or.b32 %c2, %c2, %d;\n    or.b32 %a, %a, %c2;"}


def bank_kernel(bits: int, header: str) -> Kernel:
    """One warp; lane l reads ``bits`` at shared byte ``(l * stride) mod size`` (aligned to the
    access width) in a dependent self-loop: each word holds its own address."""
    ty, regs = BANK_WIDTHS[bits]
    width = bits // 8
    body = "\n".join(f"    ld.shared.{ty} {regs}, [%a];{BANK_FOLD[bits]}" for _ in range(UNROLL))
    e = f"""
.visible .entry bank_w{bits}(.param .u64 out, .param .u32 stride, .param .u32 iters)
{{
    .reg .u64 %t0, %t1, %o, %oo, %x;
    .reg .u32 %n, %c, %a, %b, %c2, %d, %l, %s, %sb, %i;
    .reg .pred %q;
    .shared .align 16 .b8 bkbuf[{BANK_SMEM_BYTES}];
    mov.u32 %sb, bkbuf;
    mov.u32 %l, %tid.x;
    ld.param.u32 %s, [stride];
    mul.lo.u32 %a, %l, %s;
    and.b32 %a, %a, {BANK_SMEM_BYTES - width};
    add.u32 %a, %a, %sb;
    st.shared.u32 [%a], %a;
    {'' if bits == 32 else 'st.shared.u32 [%a+4], %a;'}
    {'st.shared.v2.u32 [%a+8], {%a, %a};' if bits == 128 else ''}
    bar.sync 0;
    ld.param.u32 %n, [iters];
    ld.shared.{ty} {regs}, [%a];{BANK_FOLD[bits]}
{_loop(body)}
    cvt.u64.u32 %x, %a;
    setp.ne.u32 %q, %l, 0;
    @%q bra E;
{_TAIL_E}"""
    return _kernel(f"bank_w{bits}", header, e, "bank", {"path": f"ld.shared.{bits}", "expect": "shared",
                                                        "width": width})


# --- stores: a store has no result register, so its latency is defined by a method (below)

STORE_SPANS = {  # kernel -> (PTX of the one access timed alone, path of its SASS check)
    "span_none": ("", "span.none"),
    "span_sts": ("    st.volatile.shared.u32 [%sb], %v;", "span.st.shared"),
    "span_stg": ("    st.volatile.global.u32 [%g], %v;", "span.st.global"),
}


def store_span_kernel(name: str, header: str) -> Kernel:
    """Seed 000's store-latency method (its Fig. 3): ONE store between two ``%clock64`` reads,
    issued alone. ``span_none`` holds nothing between the reads (the clock pair's own span,
    measured in the same run). ``iters`` regions in a loop, each timed on its own; the spans
    are summed outside the regions and written as the cycles (divide by ``iters``). ABI of a
    chase: ``(chain u64, out u64, warm u32, iters u32)``; the global store writes the first
    word of ``chain`` plus 4 x the thread index (a buffer of at least 8 bytes, one thread; the
    address is computed, so ptxas cannot reload it from the parameter bank inside the region)."""
    access, path = STORE_SPANS[name]
    region = "\n".join(timed([access] if access else [], "%t0", "%t1", "    "))
    e = f"""
.visible .entry {name}(.param .u64 chain, .param .u64 out, .param .u32 warm, .param .u32 iters)
{{
    .reg .u64 %g, %t0, %t1, %o, %oo, %x, %acc, %d;
    .reg .u32 %n, %c, %v, %sb;
    .reg .pred %q;
    .shared .align 16 .b8 spbuf[64];
    mov.u32 %sb, spbuf;
    ld.param.u64 %g, [chain];
    mov.u32 %c, %tid.x;
    mul.wide.u32 %x, %c, 4;
    add.u64 %g, %g, %x;
    ld.param.u32 %n, [iters];
    mov.u64 %acc, 0;
    mov.u32 %v, 50;
T:
{region}
    sub.u64 %d, %t1, %t0;
    add.u64 %acc, %acc, %d;
    add.u32 %v, %v, 1;
    sub.u32 %n, %n, 1;
    setp.ne.u32 %q, %n, 0;
    @%q bra T;
    cvt.u64.u32 %x, %v;
    mov.u64 %t0, 0;
    mov.u64 %t1, %acc;
{_tail('%x')}"""
    return _kernel(name, header, e, "store_span", {"path": path, "expect": "store", "span": True})


def chase_stg_kernel(header: str) -> Kernel:
    """Store -> dependent load round trip through one global word (``chain``'s first word):
    ``st.volatile.global [p], p; ld.volatile.global p, [p]`` (volatile: ptxas may neither
    forward the stored value nor drop the load); the load cannot return before the store's
    value is visible to it. Compared with the ``ld.global.cv`` chase (the same strong
    system-scope load) of the same run."""
    pair = "    st.volatile.global.u64 [%p], %p;\n    ld.volatile.global.u64 %p, [%p];"
    e = _global_chase_entry("chase_stg", pair, "\n".join(pair for _ in range(UNROLL)))
    return _kernel("chase_stg", header, e, "chase", {"path": "st.global+ld.global", "expect": "global"})
