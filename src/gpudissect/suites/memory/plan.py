"""What a memory run measures, and how densely: the :class:`Plan` of the suite (the chains of
the path latencies, the footprint sweeps and their refinement, the TLB study, the per-SM L2
map, line sizes, strides, bank conflicts and the bandwidth sweep; launches and repeats), and
``QUICK_PLAN``, the shorter one of ``--quick``. Sizes a run takes from its own measurements
(chain spacing, bandwidth footprints, the L2 flush) are not here: ``suite.py`` derives them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    hot_footprint: int = 2048  # path latencies: a chain this small stays in the nearest level
    hot_spacing: int = 64
    lat_iters: int = 64  # x UNROLL dependent loads timed per launch
    lat_launches: int = 3
    sweep_min: int = 4096
    sweep_max: int = 32 << 30  # capped by half the free device memory ...
    sweep_l2_multiple: int = 4  # ... and by this many times the L2 size the driver reports
    per_octave: int = 2
    refine: int = 3  # extra points inside each detected step's bracket
    dense_sweeps: tuple[str, ...] = ("ca-strided", "cg-random")  # the L2 model's sweeps ...
    refine_per_octave: int = 6  # ... fill each step's bracket this densely (at least `refine`)
    sweep_iters: int = 128
    sweep_launches: int = 3  # launches per sweep point (median; their spread flags noise)
    warm_cap: int = 1 << 20  # untimed links followed before timing (whole chain when smaller)
    max_nodes: int = 1 << 20  # larger footprints space their nodes further apart (= warm_cap:
    # every swept chain is walked whole before it is timed)
    strides: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)
    # TLB study: page strides (one visited page per stride; at and above the 2 MiB large
    # page), pages in random order, a few lines per page (the data stays in L2, so a step is
    # translation); it may span most of the device memory
    tlb_strides: tuple[int, ...] = (2 << 20, 4 << 20, 32 << 20, 512 << 20)
    tlb_region: int = 2 << 20  # the lines of a page lie in its first tlb_region bytes
    tlb_lines: int = 4096  # lines in a chain (pages x lines per page), at most ...
    tlb_lines_per_page: int = 64  # ... this many per page, at least one
    tlb_per_octave: int = 2
    tlb_max: int = 128 << 30
    tlb_free_fraction: float = 0.9
    # per-SM L2 map: one block per SM, each on a one-line self-loop, lines at random offsets
    l2map_lines: int = 64
    l2map_bytes: int = 64 << 20
    l2map_reps: int = 3
    l2map_iters: int = 16  # x UNROLL timed loads per block
    l2map_warm: int = 32
    # line size: the capacity step of a strided chain at node spacings wider than the line
    # moves up by spacing / line (a line is allocated per node); the first spacing is the
    # measured fill granularity (the reference)
    line_spacings_l1: tuple[int, ...] = (192, 768)
    line_spacings_l2: tuple[int, ...] = (384,)
    line_per_octave: int = 4
    stride_nodes: int = 1024
    stride_reps: int = 3  # cold passes per stride (fresh chain each); median
    const_footprints: tuple[int, ...] = (512, 2048, 8192, 32768)
    # in access widths; past 32 words (33, 48, 65) the conflict pattern repeats at the bank count
    bank_strides: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 16, 24, 32, 33, 48, 64, 65)
    store_span_iters: int = 256  # seed 000's method: regions of one store, each timed alone
    bw_block: int = 256  # the L2 flush's store stream (stride/L2)
    bw_blocks_per_sm: int = 8
    # bandwidth (suites/memory/bandwidth.py): access width x ILP x warps per SM per level
    bw_widths: tuple[int, ...] = (32, 64, 128)
    bw_ilps: tuple[int, ...] = (1, 2, 4, 8)
    bw_warps: tuple[int, ...] = (4, 8, 16, 32, 64)
    bw_block_warps: int = 8  # warps per block (more warps per SM: more blocks)
    bw_region_us: float = 1000.0  # timed region of an on-chip level's launch
    bw_dram_region_us: float = 3000.0  # ... of a device-memory launch
    bw_launches: int = 3
    bw_foot_multiples: tuple[float, ...] = (1, 2, 4, 8, 16, 32)  # DRAM write/read (x L2 bound)
    bw_l2_fractions: tuple[float, ...] = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2, 4)  # x L2 footprint
    seed: int = 1

    def const_spacing(self, footprint: int) -> int:
        """Node spacing of a constant chase's chain of ``footprint`` bytes."""
        return self.hot_spacing if footprint > 2 * self.hot_spacing else 8

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


QUICK_PLAN = Plan(sweep_max=512 << 20, tlb_max=1 << 30, stride_reps=1, per_octave=1, refine=1, sweep_iters=32, warm_cap=1 << 16,
                  strides=(8, 32, 128, 512), const_footprints=(2048,), bank_strides=(0, 1, 2, 32),
                  bw_widths=(128,), bw_ilps=(1, 4), bw_warps=(8, 32),
                  bw_region_us=200.0, bw_dram_region_us=500.0, bw_launches=2,
                  bw_foot_multiples=(1, 8),
                  bw_l2_fractions=(1 / 2, 4), lat_launches=2, sweep_launches=2,
                  refine_per_octave=2, tlb_strides=(2 << 20, 32 << 20), l2map_lines=16,
                  l2map_reps=2, line_per_octave=2)
