"""Can cuda.core's ``launch`` pass a 128-byte tensor map by value (a ``.param .align 64 .b8
[128]`` kernel parameter, as CUDA C++ passes a ``__grid_constant__ CUtensorMap``)? Run on a GPU:
``python3 scripts/tensormap_byvalue.py``. It tries each argument form, launches a
kernel that copies a 64-byte box through the map (``cvta.param`` gives the generic address
``cp.async.bulk.tensor`` takes) and prints one line per form: accepted and the data right, or
why not. The suite itself passes maps by address (device memory), which needs no such support."""

from __future__ import annotations

import ctypes

import numpy as np

from gpudissect.device.args import Buf
from gpudissect.device.tensormap import TensorMap

PTX = """\
.version {isa}
.target {arch}
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry bv(.param .u64 p_out, .param .align 64 .b8 p_map[128])
{{
  .reg .b64 %o, %m, %st;
  .reg .b32 %bar, %buf, %v, %z;
  .reg .pred %q;
  ld.param.u64 %o, [p_out];
  cvta.to.global.u64 %o, %o;
  mov.u64 %m, p_map;
  cvta.param.u64 %m, %m;
  mov.u32 %bar, smem;
  add.u32 %buf, %bar, 1024;
  mov.u32 %z, 0;
  mbarrier.init.shared::cta.b64 [%bar], 1;
  fence.mbarrier_init.release.cluster;
  mbarrier.arrive.expect_tx.shared::cta.b64 %st, [%bar], 64;
  cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%buf], [%m, {{%z}}], [%bar];
W:
  mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], 0;
  @!%q bra W;
  ld.shared.u32 %v, [%buf+60];
  st.global.u32 [%o], %v;
  ret;
}}
"""


def forms(raw: bytes) -> dict[str, object]:
    """The argument forms tried for the 128 map bytes."""
    return {"numpy void scalar": np.frombuffer(raw, dtype=np.dtype((np.void, len(raw))))[0],
            "ctypes c_ubyte array": (ctypes.c_ubyte * len(raw)).from_buffer_copy(raw),
            "ctypes c_uint64 array": (ctypes.c_uint64 * (len(raw) // 8)).from_buffer_copy(raw)}


def main() -> None:
    from cuda.core import LaunchConfig, launch

    from gpudissect.arch.target import target_of_device
    from gpudissect.device.device import CudaDevice
    from gpudissect.kernel.toolchain import compile_ptx

    dev = CudaDevice(0)
    tgt = target_of_device(dev.info)
    cubin = compile_ptx(PTX.format(isa=tgt.ptx_isa, arch=tgt.arch), tgt.arch).cubin
    k = dev._kernel(cubin, "bv")
    data = Buf("bv_src", data=np.arange(256, dtype=np.uint32))
    _b, ptr = dev._upload("bv_src", data, 128)
    raw = dev.encode_tensor_map(TensorMap(data, "u32", (256,), (), (16,)), ptr)
    out = dev._buf("bv_out", 64)
    for name, arg in forms(raw).items():
        dev._check(dev._cu.cuMemsetD8(int(out.handle), 0, 4))
        try:
            launch(dev.stream, LaunchConfig(grid=1, block=1, shmem_size=2048), k, out, arg)
            dev.stream.sync()
            got = np.zeros(1, dtype=np.uint32)
            dev._check(dev._cu.cuMemcpyDtoH(got.ctypes.data, int(out.handle), 4))
            verdict = "works" if int(got[0]) == 15 else f"launched, wrong data ({int(got[0])}, want 15)"
        except Exception as e:  # the form is refused: say how
            verdict = f"refused: {type(e).__name__}: {e}"[:200]
        print(f"by-value tensor map as {name}: {verdict}", flush=True)


if __name__ == "__main__":
    main()
