"""The occupancy rules of an architecture (CUDA's, as reference data in its folder) and what
they predict: resident blocks per SM for a block size, registers and shared memory, and the
limiter. Used by the suites that compare residency with them (behaviour, cluster), size
launches by them (memory, tensor), and by ``advise`` and the predictor."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpudissect.arch.target import Target


def occupancy_rules(target: Target) -> dict:
    """The CUDA occupancy rules of the target's architecture (``occupancy.toml`` of its
    folder)."""
    return target.table("occupancy")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def predict_blocks(threads: int, regs: int, smem: int, rules: dict) -> dict:
    """Blocks per SM the occupancy rules predict (the calculator's method), and the limiter.
    ``regs``: registers per thread of the cubin; ``smem``: shared memory per block (bytes)."""
    warps = -(-threads // 32)
    lim: dict[str, int] = {
        "blocks": rules["max_blocks_per_sm"],
        "warps": rules["max_warps_per_sm"] // warps,
        "threads": rules["max_threads_per_sm"] // (warps * 32),
    }
    if regs > 0:
        per_warp = _round_up(regs * 32, rules["reg_alloc_unit"])
        if per_warp * warps > rules["max_regs_per_block"] or regs > rules["max_regs_per_thread"]:
            lim["registers"] = 0
        else:
            sp = rules.get("sub_partitions", 1)
            warps_per_sp = (rules["regs_per_sm"] // sp) // per_warp
            lim["registers"] = (warps_per_sp * sp) // warps
    need = _round_up(smem + rules["smem_reserved_per_block"], rules["smem_alloc_unit"])
    if smem > rules["max_smem_per_block"]:
        lim["shared_memory"] = 0
    elif smem > 0:
        lim["shared_memory"] = rules["smem_per_sm"] // need
    blocks = min(lim.values())
    limiter = sorted(k for k, v in lim.items() if v == blocks)
    return {"blocks": blocks, "warps": blocks * warps, "limiters": limiter, "limits": lim}


def one_block_smem(rules: dict) -> int:
    """Dynamic shared memory per block that leaves room for one block per SM (the probes that
    need an SM to themselves: no other block's warps on its schedulers)."""
    smem = rules["smem_per_sm"] // 2 - rules["smem_reserved_per_block"] + rules["smem_alloc_unit"]
    if predict_blocks(32, 0, smem, rules)["blocks"] != 1:
        raise ValueError(f"no shared-memory size gives one block per SM under these rules ({smem} B)")
    return smem
