"""PTX of the cluster probes: cluster placement, distributed shared memory (DSM), cluster
barriers.

Every generator returns a :class:`~gpudissect.kernel.ptx.Kernel` under the module ``header``;
all are compiled as one module. The timed kernels use ``kernel.timing.repeated`` (the work
alone between two clock reads, ``REPS`` repetitions, the first dropped) and share one frame:

``NAME(u64 times, u64 ids, u64 targets)`` with dynamic shared memory; each CTA reads its
target rank ``targets[%cluster_ctarank]`` (u32, the host's pattern), fills its own shared
memory, meets the cluster barrier (the targets are filled), computes the target's base with
``mapa.shared::cluster``, runs the repeated region, writes ``ids[block*4 + 0..3] = (rank,
target, %smid, sink)`` (thread 0) and meets the cluster barrier again (no CTA leaves while
another may still read its shared memory). Timestamps: one row per warp (``ROW`` u64).

* ``cl_map(u64 rec, u64 spin)`` (no timed region): thread 0 of every block records
  ``rec[block*8 + 0..7] = (globaltimer start, globaltimer end, clock64 start, %smid,
  %cluster_ctarank, %clusterid.x, %nclusterid.x, %ctaid.x)`` around a spin of
  ``spin[%clusterid.x]`` SM cycles (u32).
* ``dsm_chase_n{L}``: a dependent chase of ``L`` ``ld.shared::cluster.u32`` through the
  target CTA's ring of cluster addresses; ``sm_chase_n{L}``: the same ring of plain shared
  addresses in the CTA's own memory, ``ld.shared.u32``.
* ``dsm_{ld,st}{32,64,128}_u{U}``: every thread ``U`` independent loads (stores) of the
  width into the target's shared memory, lanes on consecutive chunks (no bank conflict).
* ``dsm_atomlat_n{L}``: a dependent chain of ``atom.shared::cluster.add.u32`` (each lane its
  own word); ``dsm_{atom,red}_u{U}``: ``U`` independent atomics per thread.
* ``mapa_n{L}``: a dependent chain of ``mapa.shared::cluster.u32`` (ranks alternating).
* ``cbar_{default,relaxed}_n{L}``: ``L`` x ``barrier.cluster.arrive[.relaxed]`` +
  ``barrier.cluster.wait``.
"""

from __future__ import annotations

from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import Repeat, repeated, row_words

REPS = 4  # repetitions of each timed region in a launch; the first (cold) is dropped
REPEAT = Repeat(times="%tp", label="$Lrep", pred="%loop", smid32="%sm", smid64="%toff", nounroll=True)
ROW = row_words(REPS)  # u64 per warp
IDS = 4  # u64 per block in ``ids``
MAP_WORDS = 8  # u64 per block in cl_map's ``rec``
CHASE_WORDS = 256  # words of the pointer ring
CHASE_STRIDE = 97  # ring step (co-prime with CHASE_WORDS)
WINDOW = 32 * 1024  # bytes of each thread's address window (a power of two)
VEC = {32: 1, 64: 2, 128: 4}  # width in bits -> u32 lanes of one access
MAXNTID = 1024


def _frame(name: str, init: list[str], setup: list[str], body: list[str], sink: str, header: str,
           **meta) -> Kernel:
    """A timed kernel in the common frame (see the module's text); ``sink``: a u32 register
    kept live (written to ``ids``) after the region."""
    e = "\n".join([
        ".extern .shared .align 16 .b8 smem[];",
        f".visible .entry {name}(.param .u64 p_times, .param .u64 p_ids, .param .u64 p_tgt)",
        f".maxntid {MAXNTID}, 1, 1",
        "{",
        "  .reg .b64 %tp, %ids, %tg, %off, %w64, %toff, %t0, %t1;",
        "  .reg .b32 %th, %nth, %rank, %tgt, %base, %rbase, %sm, %blk, %wrp, %rep, %i, %a, %v, %x;",
        "  .reg .b32 %p, %acc<4>, %s<4>, %r<4>;",
        "  .reg .pred %loop, %q, %lead;",
        "  ld.param.u64 %tp, [p_times];",
        "  ld.param.u64 %ids, [p_ids];",
        "  ld.param.u64 %tg, [p_tgt];",
        "  cvta.to.global.u64 %tp, %tp;",
        "  cvta.to.global.u64 %ids, %ids;",
        "  cvta.to.global.u64 %tg, %tg;",
        "  mov.u32 %th, %tid.x;",
        "  mov.u32 %nth, %ntid.x;",
        "  mov.u32 %blk, %ctaid.x;",
        "  mov.u32 %rank, %cluster_ctarank;",
        "  mul.wide.u32 %off, %rank, 4;",
        "  add.u64 %off, %tg, %off;",
        "  ld.global.u32 %tgt, [%off];",
        "  mov.u32 %base, smem;",
        *init,
        "  barrier.cluster.arrive;",
        "  barrier.cluster.wait;",
        "  mapa.shared::cluster.u32 %rbase, %base, %tgt;",
        # this warp's row of timestamps: warp (block * warps per block + warp in block)
        "  shr.u32 %wrp, %nth, 5;",
        "  mul.lo.u32 %wrp, %wrp, %blk;",
        "  shr.u32 %x, %th, 5;",
        "  add.u32 %wrp, %wrp, %x;",
        f"  mul.wide.u32 %off, %wrp, {8 * ROW};",
        "  add.u64 %tp, %tp, %off;",
        *setup,
        *repeated(body, str(REPS), REPEAT, REPS),
        "  setp.eq.u32 %lead, %th, 0;",
        f"  mul.wide.u32 %off, %blk, {8 * IDS};",
        "  add.u64 %ids, %ids, %off;",
        "  cvt.u64.u32 %w64, %rank;",
        "  @%lead st.global.u64 [%ids], %w64;",
        "  cvt.u64.u32 %w64, %tgt;",
        "  @%lead st.global.u64 [%ids+8], %w64;",
        "  mov.u32 %x, %smid;",
        "  cvt.u64.u32 %w64, %x;",
        "  @%lead st.global.u64 [%ids+16], %w64;",
        f"  cvt.u64.u32 %w64, {sink};",
        "  @%lead st.global.u64 [%ids+24], %w64;",
        "  barrier.cluster.arrive;",
        "  barrier.cluster.wait;",
        "  ret;",
        "}",
        "",
    ])
    return Kernel(name, header, e, meta=meta)


def _ring_init(cluster: bool) -> list[str]:
    """Fill words [0, CHASE_WORDS) of the CTA's shared memory with the address of word
    ``(i + CHASE_STRIDE) % CHASE_WORDS``: its cluster address (``cluster``: the CTA's own
    window, ``mapa`` to its own rank) or its plain shared address."""
    return [
        "  mov.u32 %i, %th;",
        "$Linit:",
        f"  setp.ge.u32 %q, %i, {CHASE_WORDS};",
        "  @%q bra $Linit_done;",
        f"  add.u32 %a, %i, {CHASE_STRIDE};",
        f"  rem.u32 %a, %a, {CHASE_WORDS};",
        "  shl.b32 %a, %a, 2;",
        "  add.u32 %a, %a, %base;",
        *(["  mapa.shared::cluster.u32 %a, %a, %rank;"] if cluster else []),
        "  shl.b32 %v, %i, 2;",
        "  add.u32 %v, %v, %base;",
        "  st.shared.u32 [%v], %a;",
        "  add.u32 %i, %i, %nth;",
        "  bra $Linit;",
        "$Linit_done:",
    ]


def chase_kernel(header: str, length: int, cluster: bool) -> Kernel:
    """``dsm_chase_n{L}`` (``cluster``: through the target's window) or ``sm_chase_n{L}``."""
    name = f"{'dsm' if cluster else 'sm'}_chase_n{length}"
    op = "ld.shared::cluster.u32" if cluster else "ld.shared.u32"
    return _frame(name, _ring_init(cluster), [f"  mov.u32 %p, {'%rbase' if cluster else '%base'};"],
                  [f"  {op} %p, [%p];"] * length, "%p", header,
                  kind="latency", op=op, length=length, ptx_ops=length)


def _lane_addr(vbytes: int) -> list[str]:
    """%a = the target's base + (tid * vbytes) mod WINDOW: a warp's lanes on consecutive chunks."""
    return [f"  mul.lo.u32 %a, %th, {vbytes};",
            f"  and.b32 %a, %a, {WINDOW - 1};",
            "  add.u32 %a, %a, %rbase;"]


def _offsets(n: int, vbytes: int) -> list[int]:
    """Byte offsets of a thread's ``n`` accesses: each a warp-wide chunk further, modulo the window."""
    return [(j * 32 * vbytes) % WINDOW for j in range(n)]


def bw_kernel(header: str, op: str, bits: int, units: int) -> Kernel:
    """``dsm_{ld,st}{bits}_u{U}``: ``U`` independent accesses of ``bits`` per thread."""
    n = VEC[bits]
    vb = 4 * n
    regs = "{" + ", ".join(f"%r{k}" for k in range(n)) + "}" if n > 1 else "%r0"
    srcs = "{" + ", ".join(f"%s{k}" for k in range(n)) + "}" if n > 1 else "%s0"
    vec = f".v{n}" if n > 1 else ""
    body: list[str] = []
    for off in _offsets(units, vb):
        if op == "ld":
            body.append(f"  ld.shared::cluster{vec}.u32 {regs}, [%a+{off}];")
            body += [f"  xor.b32 %acc{k}, %acc{k}, %r{k};" for k in range(n)]
        else:
            body.append(f"  st.shared::cluster{vec}.u32 [%a+{off}], {srcs};")
    setup = [*_lane_addr(vb), *[f"  mov.u32 %acc{k}, 0;" for k in range(4)],
             *[f"  add.u32 %s{k}, %th, {k + 1};" for k in range(4)]]
    sink = "%acc0"
    if op == "ld":
        body_fold = [f"  xor.b32 %acc0, %acc0, %acc{k};" for k in range(1, n)]
    else:
        body_fold = []
    k = _frame(f"dsm_{op}{bits}_u{units}", [], setup, body, sink, header,
               kind="bandwidth", op=op, bits=bits, units=units, bytes_per_thread=units * vb, ptx_ops=units)
    if body_fold:  # fold the accumulators after the loop (outside the timed region)
        k.entry = k.entry.replace("  setp.eq.u32 %lead, %th, 0;", "\n".join(body_fold) + "\n  setp.eq.u32 %lead, %th, 0;", 1)
    return k


def atom_latency_kernel(header: str, length: int) -> Kernel:
    setup = ["  shl.b32 %a, %th, 2;", f"  and.b32 %a, %a, {WINDOW - 1};", "  add.u32 %a, %a, %rbase;",
             "  mov.u32 %p, 1;"]
    return _frame(f"dsm_atomlat_n{length}", [], setup, ["  atom.shared::cluster.add.u32 %p, [%a], %p;"] * length,
                  "%p", header, kind="latency", op="atom.shared::cluster.add.u32", length=length, ptx_ops=length)


def atomic_kernel(header: str, op: str, units: int) -> Kernel:
    """``dsm_{atom,red}_u{U}``: ``U`` independent 32-bit adds per thread."""
    body: list[str] = []
    for j, off in enumerate(_offsets(units, 4)):
        if op == "atom":
            body.append(f"  atom.shared::cluster.add.u32 %r0, [%a+{off}], 1;")
            body.append(f"  xor.b32 %acc{j % 4}, %acc{j % 4}, %r0;")
        else:
            body.append(f"  red.shared::cluster.add.u32 [%a+{off}], 1;")
    setup = [*_lane_addr(4), *[f"  mov.u32 %acc{k}, 0;" for k in range(4)]]
    k = _frame(f"dsm_{op}_u{units}", [], setup, body, "%acc0", header, kind="atomic", op=op, units=units,
               ptx_ops=units)
    if op == "atom":
        k.entry = k.entry.replace("  setp.eq.u32 %lead, %th, 0;", "\n".join(
            f"  xor.b32 %acc0, %acc0, %acc{i};" for i in (1, 2, 3)) + "\n  setp.eq.u32 %lead, %th, 0;", 1)
    return k


def mapa_kernel(header: str, length: int) -> Kernel:
    """A dependent chain of ``mapa`` (ranks alternating between the target and the CTA's own,
    so that no two in a row are alike)."""
    body = [f"  mapa.shared::cluster.u32 %p, %p, {'%tgt' if i % 2 == 0 else '%rank'};" for i in range(length)]
    return _frame(f"mapa_n{length}", [], ["  add.u32 %p, %base, %th;"], body, "%p", header,
                  kind="latency", op="mapa.shared::cluster.u32", length=length, ptx_ops=length)


BARRIER_FORMS = {"default": "barrier.cluster.arrive;", "relaxed": "barrier.cluster.arrive.relaxed;"}


def barrier_kernel(header: str, form: str, length: int) -> Kernel:
    body = []
    for _ in range(length):
        body += [f"  {BARRIER_FORMS[form]}", "  barrier.cluster.wait;"]
    return _frame(f"cbar_{form}_n{length}", [], ["  mov.u32 %p, 0;"], body, "%p", header,
                  kind="barrier", op=BARRIER_FORMS[form].rstrip(";"), length=length, ptx_ops=length)


def map_kernel(header: str) -> Kernel:
    """``cl_map``: where each CTA of each cluster runs, and when (no timed region)."""
    e = "\n".join([
        ".visible .entry cl_map(.param .u64 p_rec, .param .u64 p_spin)",
        "{",
        "  .reg .b64 %rec, %spin, %g0, %g1, %c0, %cnow, %cend, %off, %w64;",
        "  .reg .b32 %ti, %bx, %sm, %rank, %cid, %ncid, %cyc;",
        "  .reg .pred %p0, %pl;",
        "  mov.u64 %g0, %globaltimer;",
        "  mov.u64 %c0, %clock64;",
        "  ld.param.u64 %rec, [p_rec];",
        "  ld.param.u64 %spin, [p_spin];",
        "  cvta.to.global.u64 %rec, %rec;",
        "  cvta.to.global.u64 %spin, %spin;",
        "  mov.u32 %ti, %tid.x;",
        "  mov.u32 %bx, %ctaid.x;",
        "  mov.u32 %cid, %clusterid.x;",
        "  mul.wide.u32 %off, %cid, 4;",
        "  add.u64 %spin, %spin, %off;",
        "  ld.global.u32 %cyc, [%spin];",
        "  cvt.u64.u32 %cend, %cyc;",
        "  add.u64 %cend, %cend, %c0;",
        "$Lspin:",
        "  mov.u64 %cnow, %clock64;",
        "  setp.lt.u64 %pl, %cnow, %cend;",
        "  @%pl bra $Lspin;",
        "  mov.u64 %g1, %globaltimer;",
        "  setp.ne.u32 %p0, %ti, 0;",
        "  @%p0 bra $Ldone;",
        "  mov.u32 %sm, %smid;",
        "  mov.u32 %rank, %cluster_ctarank;",
        "  mov.u32 %ncid, %nclusterid.x;",
        f"  mul.wide.u32 %off, %bx, {8 * MAP_WORDS};",
        "  add.u64 %rec, %rec, %off;",
        "  st.global.u64 [%rec], %g0;",
        "  st.global.u64 [%rec+8], %g1;",
        "  st.global.u64 [%rec+16], %c0;",
        "  cvt.u64.u32 %w64, %sm;",
        "  st.global.u64 [%rec+24], %w64;",
        "  cvt.u64.u32 %w64, %rank;",
        "  st.global.u64 [%rec+32], %w64;",
        "  cvt.u64.u32 %w64, %cid;",
        "  st.global.u64 [%rec+40], %w64;",
        "  cvt.u64.u32 %w64, %ncid;",
        "  st.global.u64 [%rec+48], %w64;",
        "  cvt.u64.u32 %w64, %bx;",
        "  st.global.u64 [%rec+56], %w64;",
        "$Ldone:",
        "  ret;",
        "}",
        "",
    ])
    return Kernel("cl_map", header, e, meta={"kind": "map"})


# the two lengths (latency: chain steps; throughput: accesses per thread) of every timed probe
LAT_LENGTHS = (32, 128)
BAR_LENGTHS = (8, 32)
BW_UNITS = (8, 24)
BW_BITS = (32, 64, 128)


def all_kernels(header: str) -> list[Kernel]:
    ks = [map_kernel(header)]
    for n in LAT_LENGTHS:
        ks += [chase_kernel(header, n, True), chase_kernel(header, n, False), atom_latency_kernel(header, n),
               mapa_kernel(header, n)]
    for n in BAR_LENGTHS:
        ks += [barrier_kernel(header, f, n) for f in BARRIER_FORMS]
    for u in BW_UNITS:
        ks += [bw_kernel(header, op, b, u) for op in ("ld", "st") for b in BW_BITS]
        ks += [atomic_kernel(header, op, u) for op in ("atom", "red")]
    return ks
