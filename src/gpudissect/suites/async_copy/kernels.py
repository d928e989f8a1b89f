"""PTX generators of the async suite: Hopper's asynchronous copy machinery.

One kernel ABI for all: ``(out u64, src u64, dst u64, map u64, a u32, b u64)``. ``out`` gets
one row per warp (lane 0 writes it after each repetition, outside the timed region):
``(clock0, clock1, globaltimer0, globaltimer1)`` per repetition, then ``%smid`` (:data:`ROW`
u64). ``src``/``dst``: global buffers; ``map``: the generic address of a tensor map
(``device.TensorMap``); ``a``: a per-launch slot (fresh DRAM addresses) or the tile count of a
bandwidth run; ``b``: 0 (the load chains' mask, :func:`_mask_setup`).

Two kinds of kernel:

* **chains** (one thread; block of one warp, lanes 1-31 leave at once, the handshake keeps
  lane 0 of warp 1): ``length`` instances of an operation in a straight line (unrolled) inside
  the timed region; two lengths give the cost per instance as the slope (the region's constant
  costs cancel). A wait on an mbarrier inside the chain is the work itself (its retry branch is
  part of what is timed);
* **streams** (bandwidth): every CTA walks the tiles ``ctaid, ctaid + grid, ...`` of a
  power-of-two footprint (``a`` tiles per repetition, addresses modulo the footprint): the TMA
  kernels with one issuing thread and a ring of ``STAGES`` shared-memory buffers, each with its
  own mbarrier; the plain-load and cp.async kernels with all 256 threads.

The timed region comes from ``kernel/timing.py`` (``timed``); the barrier set-up, fences and
the stores of the timestamps are outside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudissect.bench.stream_read import MAXNREG, load_trip
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.timing import timed

REPS = 4  # repetitions of the timed region per launch; the first (cold) is dropped
ROW = 4 * REPS + 2  # u64 per warp in 'out' (even: 16-byte aligned rows)
LENGTHS = (8, 32)  # chain lengths (the slope's two points)
STAGES = 4  # TMA ring depth of the stream kernels
BAR_BYTES = 1024  # the mbarriers sit in the first KiB of dynamic shared memory
DRAM_STRIDE = 32768  # bytes between the tiles of a DRAM-miss chain (at least the largest tile: fresh lines)
STREAM_THREADS = 256  # threads per CTA of the ld.global / cp.async streams
ILP = 4  # independent accesses per thread per trip of those streams
MBAR_MAX_COUNT = (1 << 20) - 1  # an mbarrier's largest expected-arrival count


@dataclass
class Spec:
    """What one kernel does: ``kind`` (the body's generator), its parameters, and the launch
    shape it is written for."""

    name: str
    kind: str
    params: dict = field(default_factory=dict)
    length: int = 1
    threads: int = 32
    smem: int = BAR_BYTES


# --------------------------------------------------------------------------- the skeleton
_PARAMS = ("(.param .u64 p_out, .param .u64 p_src, .param .u64 p_dst, .param .u64 p_map, "
           ".param .u32 p_a, .param .u64 p_b)")

_DECL = """\
  .reg .b64 %out, %src, %dst, %map, %t0, %t1, %g0, %g1, %st, %x, %y, %addr, %v, %row, %mask;
  .reg .b32 %th, %warp, %lane, %bar, %buf, %rep, %a, %b, %sm, %r, %c, %par, %i, %j, %k, %s, %n, %m;
  .reg .b32 %cx, %cy, %cz, %cw, %cv, %sb, %sa, %w0, %w1, %w2, %w3;
  .reg .b32 %v0, %v1, %v2, %v3, %v4, %v5, %v6, %v7, %v8, %v9, %v10, %v11, %v12, %v13, %v14, %v15;
  .reg .pred %p, %q, %lead, %more;
  ld.param.u64 %out, [p_out];
  ld.param.u64 %src, [p_src];
  ld.param.u64 %dst, [p_dst];
  ld.param.u64 %map, [p_map];
  ld.param.u32 %a, [p_a];
  ld.param.u64 %mask, [p_b];
  cvta.to.global.u64 %out, %out;
  cvta.to.global.u64 %src, %src;
  cvta.to.global.u64 %dst, %dst;
  mov.u32 %th, %tid.x;
  shr.u32 %warp, %th, 5;
  and.b32 %lane, %th, 31;
  setp.eq.u32 %lead, %lane, 0;
  mov.u32 %bar, smem;
  add.u32 %buf, %bar, {bar_bytes};
  // this warp's row of 'out'
  mov.u32 %r, %ntid.x;
  shr.u32 %r, %r, 5;
  mov.u32 %c, %ctaid.x;
  mad.lo.u32 %r, %c, %r, %warp;
  mul.wide.u32 %row, %r, {row_bytes};
  add.u64 %row, %out, %row;
"""


def _entry(name: str, setup: list[str], pre: list[str], body: list[str], post: list[str],
           directives: tuple[str, ...] = (), defer: bool = False) -> str:
    """The kernel text: declarations, ``setup`` (once), then REPS repetitions of ``pre`` (not
    timed), the timed ``body``, the timestamps stored (lane 0) and ``post`` (not timed);
    ``directives``: performance directives of the entry (e.g. ``.maxnreg``). ``defer`` (the
    streams): each repetition's timestamps are kept in registers (predicated moves) and stored
    after the last one, so that no store of the harness falls between the repetitions, whose
    union is timed as one grid-wide window (analyse.stream_window)."""
    if defer:
        keep = [f"  .reg .b64 %ts<{4 * REPS}>;", "  .reg .pred %dq;"]
        stamp = []
        for k in range(REPS):
            stamp += [f"  setp.eq.u32 %dq, %rep, {k};",
                      *(f"  @%dq mov.b64 %ts{4 * k + i}, {r};" for i, r in enumerate(("%t0", "%t1", "%g0", "%g1")))]
        flush = [f"  @%lead st.global.v2.u64 [%row+{32 * k + 16 * h}], {{%ts{4 * k + 2 * h}, %ts{4 * k + 2 * h + 1}}};"
                 for k in range(REPS) for h in range(2)]
    else:
        keep, flush = [], []
        stamp = ["  mul.wide.u32 %x, %rep, 32;", "  add.u64 %x, %row, %x;",
                 "  @%lead st.global.v2.u64 [%x], {%t0, %t1};", "  @%lead st.global.v2.u64 [%x+16], {%g0, %g1};"]
    lines = [f".visible .entry {name}{_PARAMS}", *directives, "{",
             _DECL.format(bar_bytes=BAR_BYTES, row_bytes=ROW * 8).rstrip("\n"), *keep, *setup,
             "  mov.u32 %rep, 0;", "$Lrep:", *pre,
             "  mov.u64 %g0, %globaltimer;", *timed(body, "%t0", "%t1"), "  mov.u64 %g1, %globaltimer;",
             *stamp, *post,
             "  add.u32 %rep, %rep, 1;", f"  setp.lt.u32 %p, %rep, {REPS};", "  @%p bra $Lrep;", *flush,
             "  mov.u32 %sm, %smid;", "  cvt.u64.u32 %v, %sm;",
             f"  @%lead st.global.u64 [%row+{8 * 4 * REPS}], %v;", "$Lend:", "  ret;", "}"]
    return "\n".join(lines) + "\n"


# after a chain of loads: its last address kept live (stored only if it is zero, which it never
# is; the compiler cannot know that): the loads are not dead code
_SINK = ["  setp.eq.u64 %p, %addr, 0;", "  @%p st.global.u64 [%dst], %y;"]


def _only_thread0() -> list[str]:
    return ["  setp.ne.u32 %p, %th, 0;", "  @%p bra $Lend;"]


def _init(bars: int, count: int | str = 1) -> list[str]:
    """Initialise ``bars`` mbarriers (8 bytes apart from %bar) and make the initialisation
    visible to the async proxy."""
    out = [f"  mbarrier.init.shared::cta.b64 [%bar+{8 * i}], {count};" for i in range(bars)]
    return out + ["  fence.mbarrier_init.release.cluster;", "  fence.proxy.async.shared::cta;"]


def _wait(label: str, bar: str, parity: str, hint: str = "") -> list[str]:
    """Wait until the phase of ``parity`` of the mbarrier at ``bar`` has completed (try_wait
    returns false when its time limit passes first: try again)."""
    h = f", {hint}" if hint else ""
    return [f"{label}:", f"  mbarrier.try_wait.parity.shared::cta.b64 %q, [{bar}], {parity}{h};",
            f"  @!%q bra {label};"]


# --------------------------------------------------------------------------- chain bodies
# mbarrier and fence operations, back to back in one thread: name -> (set-up before each
# repetition, one instance; ``{b8}``: 8 x (instance mod 8), the barrier of a round robin over 8:
# ptxas merges back-to-back expect_tx on one barrier into one). The barrier's count never lets
# a phase complete where the op arrives; the test/try waits chain their result into the next
# one's parity (a SEL between).
OP_BODIES: dict[str, tuple[list[str], list[str]]] = {
    "mbarrier.init": ([], ["  mbarrier.init.shared::cta.b64 [%bar], 1;"]),
    "mbarrier.arrive": (_init(8, MBAR_MAX_COUNT), ["  mbarrier.arrive.shared::cta.b64 %st, [%bar+{b8}];"]),
    "mbarrier.arrive.expect_tx": (_init(8, MBAR_MAX_COUNT),
                                  ["  mbarrier.arrive.expect_tx.shared::cta.b64 %st, [%bar+{b8}], 16;"]),
    "mbarrier.expect_tx": (_init(8, MBAR_MAX_COUNT),
                           ["  mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%bar+{b8}], 16;"]),
    # phase 0 incomplete: test_wait answers false at once
    "mbarrier.test_wait(pending)": (_init(1, 1) + ["  mov.u32 %par, 0;"],
                                    ["  mbarrier.test_wait.parity.shared::cta.b64 %q, [%bar], %par;",
                                     "  selp.u32 %par, 1, 0, %q;"]),
    # phase 0 complete (one arrival of one): try_wait answers true at once
    "mbarrier.try_wait(done)": (_init(1, 1) + ["  mbarrier.arrive.shared::cta.b64 %st, [%bar];",
                                               "  mov.u32 %par, 0;"],
                                ["  mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], %par;",
                                 "  selp.u32 %par, 0, 1, %q;"]),
    "mbarrier.try_wait(done,hint)": (_init(1, 1) + ["  mbarrier.arrive.shared::cta.b64 %st, [%bar];",
                                                    "  mov.u32 %par, 0;"],
                                     ["  mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], %par, 1000;",
                                      "  selp.u32 %par, 0, 1, %q;"]),
    # phase 0 never completes: how long try_wait suspends the thread before it answers false
    "mbarrier.try_wait(timeout)": (_init(1, 1) + ["  mov.u32 %par, 0;"],
                                   ["  mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], %par;",
                                    "  selp.u32 %par, 1, 0, %q;"]),
    "mbarrier.try_wait(timeout,hint=1000ns)": (_init(1, 1) + ["  mov.u32 %par, 0;"],
                                               ["  mbarrier.try_wait.parity.shared::cta.b64 %q, [%bar], %par, 1000;",
                                                "  selp.u32 %par, 1, 0, %q;"]),
    "fence.proxy.async": ([], ["  fence.proxy.async;"]),
    "fence.proxy.async.shared::cta": ([], ["  fence.proxy.async.shared::cta;"]),
    "fence.mbarrier_init.release.cluster": ([], ["  fence.mbarrier_init.release.cluster;"]),
    "fence.acq_rel.cluster": ([], ["  fence.acq_rel.cluster;"]),
    "fence.acq_rel.cta": ([], ["  fence.acq_rel.cta;"]),
    "cp.async.commit_group": ([], ["  cp.async.commit_group;"]),
    "cp.async.wait_group": ([], ["  cp.async.wait_group 0;"]),
    "cp.async.bulk.commit_group": ([], ["  cp.async.bulk.commit_group;"]),
}


def op_chain(spec: Spec) -> str:
    pre, one = OP_BODIES[spec.params["op"]]
    body = [x.replace("{b8}", str(8 * (i % 8))) for i in range(spec.length) for x in one]
    return _entry(spec.name, _only_thread0(), pre, body, [])


def phase_chain(spec: Spec) -> str:
    """One thread: arrive on a barrier of count 1 (the phase completes) and wait for it,
    ``length`` times: a phase flip's round trip."""
    body = []
    for i in range(spec.length):
        body += ["  mbarrier.arrive.shared::cta.b64 %st, [%bar];", *_wait(f"$Lw{i}", "%bar", str(i % 2))]
    return _entry(spec.name, _only_thread0() + _init(1, 1), [], body, [])


def handshake(spec: Spec) -> str:
    """Lane 0 of warp 0 (producer) and of warp 1 (consumer), two barriers of count 1: the
    producer arrives on 'full' and waits for 'empty', the consumer waits for 'full' and
    arrives on 'empty'; the producer's region is one round trip per instance (timed region:
    the producer's; the consumer runs the same loop untimed)."""
    n = spec.length
    setup = ["  setp.ne.u32 %p, %th, 0;", "  @%p bra $Lnoinit;", *_init(2, 1), "$Lnoinit:", "  bar.sync 0;",
             "  setp.ne.u32 %p, %lane, 0;", "  @%p bra $Lend;", "  setp.gt.u32 %p, %warp, 1;", "  @%p bra $Lend;",
             "  setp.eq.u32 %p, %warp, 1;", "  @%p bra $Lconsumer;"]
    body = []
    for i in range(n):
        body += ["  mbarrier.arrive.shared::cta.b64 %st, [%bar];", *_wait(f"$Lp{i}", "%bar+8", str(i % 2))]
    text = _entry(spec.name, setup, [], body, [])
    cons = ["$Lconsumer:", "  mov.u32 %rep, 0;", "$Lcrep:"]
    for i in range(n):
        cons += [*_wait(f"$Lc{i}", "%bar", str(i % 2)), "  mbarrier.arrive.shared::cta.b64 %st, [%bar+8];"]
    cons += ["  add.u32 %rep, %rep, 1;", f"  setp.lt.u32 %p, %rep, {REPS};", "  @%p bra $Lcrep;", "  ret;"]
    return text.replace("$Lend:\n  ret;\n}", "$Lend:\n  ret;\n" + "\n".join(cons) + "\n}")


# cp.async sizes and cache operators; the synchronous path of the same size
CPA_VARIANTS = {"ca4": ("ca", 4), "ca8": ("ca", 8), "ca16": ("ca", 16), "cg16": ("cg", 16)}
SYNC_TYPES = {4: (".u32", "%w0"), 8: (".u64", "%v"), 16: (".v4.u32", "{%w0, %w1, %w2, %w3}")}


def cpasync_chain(spec: Spec) -> str:
    """One thread: a copy of ``size`` bytes from one global address (a cache hit after the first
    repetition) to shared memory, waited for (commit + wait_group 0) before the next."""
    cop, size = CPA_VARIANTS[spec.params["variant"]]
    one = [f"  cp.async.{cop}.shared.global [%buf], [%src], {size};", "  cp.async.commit_group;",
           "  cp.async.wait_group 0;"]
    return _entry(spec.name, _only_thread0(), [], one * spec.length, [])


def _mask_setup() -> list[str]:
    """%mask is the parameter ``b`` (0 at run time; ptxas cannot know it, all 64 bits of it): a
    loaded value ANDed with it is 0 whatever the memory holds, and the next address still
    depends on the load (at its full width)."""
    return []


def sync_chain(spec: Spec) -> str:
    """The synchronous copy of the same bytes: ``ld.global.<cop>`` then ``st.shared``; the next
    load's address depends on the loaded value (masked to 0 by %mask: the chain's glue, a
    widening, an AND and an add)."""
    cop, size = CPA_VARIANTS[spec.params["copy"]]
    ty, regs = SYNC_TYPES[size]
    first = regs.strip("{}").split(",")[0].strip()
    glue = ([] if first == "%v" else ["  cvt.u64.u32 %v, %w0;"]) + \
        ["  and.b64 %v, %v, %mask;", "  add.u64 %addr, %addr, %v;"]
    body = []
    for i in range(spec.length):
        body += [f"  ld.global.{cop}{ty} {regs}, [%addr];", f"  st.shared{ty} [%buf+{16 * i}], {regs};", *glue]
    return _entry(spec.name, _only_thread0() + _mask_setup() + ["  mov.u64 %addr, %src;"], [], body, _SINK)


def _tile_addr(spec: Spec, i: int) -> list[str]:
    """%addr of instance ``i``: the same tile every time (``where`` l2), or a fresh tile of the
    launch's slot ``a`` (dram: DRAM_STRIDE apart, never touched before in the run)."""
    if spec.params["where"] == "l2":
        return []
    return [f"  add.u64 %addr, %y, {i * DRAM_STRIDE};"]


def _slot_setup(spec: Spec) -> list[str]:
    n = max(LENGTHS) * REPS
    return ["  mov.u64 %addr, %src;", f"  mul.wide.u32 %y, %a, {n * DRAM_STRIDE};", "  add.u64 %y, %y, %src;"]


def tma_load_chain(spec: Spec) -> str:
    """One thread: ``cp.async.bulk`` global -> shared of ``tile`` bytes completing on an mbarrier
    (expect_tx first), waited for before the next: issue to completion, per instance."""
    t = spec.params["tile"]
    body = []
    for i in range(spec.length):
        body += [*_tile_addr(spec, i), f"  mbarrier.arrive.expect_tx.shared::cta.b64 %st, [%bar], {t};",
                 f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%buf], [%addr], {t}, [%bar];",
                 *_wait(f"$Lw{i}", "%bar", str(i % 2))]
    return _entry(spec.name, _only_thread0() + _init(1, 1) + _slot_setup(spec), _rep_offset(spec), body, [])


def _rep_offset(spec: Spec) -> list[str]:
    """DRAM chains: each repetition's tiles after the previous repetition's."""
    if spec.params.get("where") != "dram":
        return []
    return [f"  add.u64 %y, %y, {max(LENGTHS) * DRAM_STRIDE};"]


def ld_chain(spec: Spec) -> str:
    """One thread: dependent ``ld.global.cg.u64`` (the value masked to 0 and added to the next
    address: an AND and an add of glue), the same tile (l2) or fresh tiles (dram): the
    synchronous load's latency beside TMA's."""
    body = []
    for i in range(spec.length):
        if spec.params["where"] == "l2":
            body += ["  ld.global.cg.u64 %v, [%addr];", "  and.b64 %v, %v, %mask;", "  add.u64 %addr, %addr, %v;"]
        else:
            body += [f"  ld.global.cg.u64 %v, [%y+{i * DRAM_STRIDE}];", "  and.b64 %v, %v, %mask;",
                     "  add.u64 %y, %y, %v;"]
    # the sink reads the chain's registers, writes neither (the l2 chain goes on from %addr in the
    # next repetition)
    sink = ["  add.u64 %x, %addr, %y;", "  setp.eq.u64 %p, %x, 0;", "  @%p st.global.u64 [%dst], %y;"]
    return _entry(spec.name, _only_thread0() + _mask_setup() + _slot_setup(spec), _rep_offset(spec), body, sink)


# TMA stores and reductions shared -> global: the PTX of one operation on ``tile`` bytes
STORE_OPS = {
    "store": "cp.async.bulk.global.shared::cta.bulk_group [{dst}], [%buf], {t};",
    "reduce.add.u32": "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [{dst}], [%buf], {t};",
}


def tma_store_chain(spec: Spec) -> str:
    """One thread: a bulk store (or reduction) of ``tile`` bytes, committed and waited for
    (``wait_group`` 0: the writes done; ``.read``: only the shared-memory source read)."""
    t, op = spec.params["tile"], spec.params["op"]
    w = ".read" if spec.params.get("read") else ""
    one = ["  " + STORE_OPS[op].format(dst="%dst", t=t), "  cp.async.bulk.commit_group;",
           f"  cp.async.bulk.wait_group{w} 0;"]
    return _entry(spec.name, _only_thread0(), [], one * spec.length, [])


def tensor_coords(rank: int) -> str:
    return "{" + ", ".join(["%cx", "%cy", "%cz", "%cw", "%cv"][:rank]) + "}"


def _map_setup() -> list[str]:
    return ["  fence.proxy.tensormap::generic.acquire.gpu [%map], 128;",
            "  mov.u32 %cx, 0;", "  mov.u32 %cy, 0;", "  mov.u32 %cz, 0;", "  mov.u32 %cw, 0;", "  mov.u32 %cv, 0;"]


def tensor_chain(spec: Spec) -> str:
    """One thread: ``cp.async.bulk.tensor.<rank>d`` of the map's box at the origin (the same
    tile every time: an L2 hit after the first), waited for before the next."""
    r, nb = spec.params["rank"], spec.params["box_bytes"]
    body = []
    for i in range(spec.length):
        body += [f"  mbarrier.arrive.expect_tx.shared::cta.b64 %st, [%bar], {nb};",
                 f"  cp.async.bulk.tensor.{r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 f"[%buf], [%map, {tensor_coords(r)}], [%bar];", *_wait(f"$Lw{i}", "%bar", str(i % 2))]
    return _entry(spec.name, _only_thread0() + _init(1, 1) + _map_setup(), [], body, [])


# --------------------------------------------------------------------------- streams
def _ring_issue(spec: Spec, issue: list[str], t: int) -> list[str]:
    """The TMA stream loop of one thread: tile %j (from %ctaid, step %nctaid) into ring slot
    i % stages (a power of two); before reusing a slot, wait for its previous phase; after the loop, wait for
    the copies still in flight. ``issue``: the copy of tile %j into %sb on barrier %sa."""
    stages = spec.params.get("stages", STAGES)
    lg = stages.bit_length() - 1
    return [
        "  mov.u32 %j, %c;", "  mov.u32 %i, 0;",
        "$Lloop:",
        f"  and.b32 %s, %i, {stages - 1};",
        "  shl.b32 %sa, %s, 3;", "  add.u32 %sa, %sa, %bar;",
        f"  mul.lo.u32 %sb, %s, {t};", "  add.u32 %sb, %sb, %buf;",
        f"  setp.lt.u32 %p, %i, {stages};",
        "  @%p bra $Lissue;",
        f"  shr.u32 %par, %i, {lg};", "  add.u32 %par, %par, 1;", "  and.b32 %par, %par, 1;",
        *_wait("$Lslot", "%sa", "%par"),
        "$Lissue:",
        *issue,
        "  add.u32 %i, %i, 1;", "  add.u32 %j, %j, %n;",
        "  setp.lt.u32 %more, %j, %a;",
        "  @%more bra $Lloop;",
        # drain: the last min(i, stages) copies
        f"  sub.u32 %k, %i, {stages};", f"  setp.lt.u32 %p, %i, {stages};", "  @%p mov.u32 %k, 0;",
        "$Ldrain:",
        "  setp.ge.u32 %p, %k, %i;", "  @%p bra $Ldone;",
        f"  and.b32 %s, %k, {stages - 1};", "  shl.b32 %sa, %s, 3;", "  add.u32 %sa, %sa, %bar;",
        f"  shr.u32 %par, %k, {lg};", "  and.b32 %par, %par, 1;",
        *_wait("$Ldw", "%sa", "%par"),
        "  add.u32 %k, %k, 1;", "  bra $Ldrain;",
        "$Ldone:",
    ]


def tma_stream(spec: Spec) -> str:
    """TMA global -> shared stream (bulk or 2D tensor): tile %j of a footprint of ``mask + 1``
    bytes (bulk) or of the 2D map (``tiles_x`` tiles across); one thread per CTA issues."""
    t = spec.params["tile"]
    if spec.params["mode"] == "bulk":
        addr = [f"  mul.wide.u32 %x, %j, {t};", f"  and.b64 %x, %x, {spec.params['mask']};",
                "  add.u64 %addr, %src, %x;"]
        cp = f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%sb], [%addr], {t}, [%sa];"
        setup: list[str] = []
    else:
        tx, bw, bh, rows = (spec.params[k] for k in ("tiles_x", "box_w", "box_h", "tiles_y"))
        addr = [f"  and.b32 %cx, %j, {tx - 1};", f"  mul.lo.u32 %cx, %cx, {bw};",
                f"  shr.u32 %cy, %j, {tx.bit_length() - 1};", f"  and.b32 %cy, %cy, {rows - 1};",
                f"  mul.lo.u32 %cy, %cy, {bh};"]
        cp = ("  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
              "[%sb], [%map, {%cx, %cy}], [%sa];")
        setup = _map_setup()
    issue = [*addr, f"  mbarrier.arrive.expect_tx.shared::cta.b64 %st, [%sa], {t};", cp]
    pre = _init(spec.params.get("stages", STAGES), 1)
    grid = ["  mov.u32 %c, %ctaid.x;", "  mov.u32 %n, %nctaid.x;"]
    return _entry(spec.name, _only_thread0() + setup + grid, pre, _ring_issue(spec, issue, t), [], defer=True)


def tma_store_stream(spec: Spec) -> str:
    """TMA shared -> global stream (bulk store or reduction): tile %j of the footprint written
    from one shared buffer, at most STAGES bulk groups reading shared memory at once."""
    t, op = spec.params["tile"], spec.params["op"]
    body = [
        "  mov.u32 %j, %c;",
        "$Lloop:",
        f"  mul.wide.u32 %x, %j, {t};", f"  and.b64 %x, %x, {spec.params['mask']};", "  add.u64 %addr, %dst, %x;",
        "  " + STORE_OPS[op].format(dst="%addr", t=t), "  cp.async.bulk.commit_group;",
        f"  cp.async.bulk.wait_group.read {STAGES - 1};",
        "  add.u32 %j, %j, %n;", "  setp.lt.u32 %more, %j, %a;", "  @%more bra $Lloop;",
        "  cp.async.bulk.wait_group 0;",
    ]
    grid = ["  mov.u32 %c, %ctaid.x;", "  mov.u32 %n, %nctaid.x;"]
    return _entry(spec.name, _only_thread0() + grid, ["  fence.proxy.async.shared::cta;"], body, [], defer=True)


def _warp_chunks(ilp: int, size: int) -> list[str]:
    """Stream addressing: warp ``w`` of the grid (``%nctaid * warps`` of them: %n) owns chunk
    ``k * %n + w`` at trip k, ``ilp * 32 * size`` contiguous bytes (access q of lane l at
    ``q * 32 * size + l * size``); the grid walks the footprint as one contiguous window.
    Sets %c (the warp's first chunk: each repetition starts %j there), %n (warps in the grid)
    and %y (the lane's offset, plus the source)."""
    return ["  mov.u32 %n, %nctaid.x;", f"  mul.lo.u32 %n, %n, {STREAM_THREADS // 32};",
            "  mov.u32 %c, %ctaid.x;", f"  mad.lo.u32 %c, %c, {STREAM_THREADS // 32}, %warp;",
            f"  mul.wide.u32 %y, %lane, {size};", "  add.u64 %y, %y, %src;"]


def _chunk_addr(ilp: int, size: int, mask: int) -> list[str]:
    return [f"  mul.wide.u32 %x, %j, {ilp * 32 * size};", f"  and.b64 %x, %x, {mask};", "  add.u64 %x, %x, %y;"]


LD_MAX_ILP = 8  # the most loads per trip ld_stream has registers for


def ld_stream(spec: Spec) -> str:
    """All threads: ``ilp`` independent ``ld.global.cg.v4.u32`` per trip (each one 512
    contiguous bytes per warp, the warp's chunk ``ilp * 512`` bytes: :func:`_warp_chunks`), all
    issued before the first use (``bench/stream_read.py``: the trip, and ``.maxnreg 255``
    without which ptxas interleaves the folds and keeps fewer loads in flight), XOR-folded into
    a sink written (never, in practice) after the region. The loop is not unrolled: the loads
    in flight are the ILP the sweep names."""
    mask, ilp = spec.params["mask"], spec.params.get("ilp", ILP)
    if not 1 <= ilp <= LD_MAX_ILP:
        raise ValueError(f"ld_stream: ilp {ilp} outside 1..{LD_MAX_ILP}")
    regs = [f"%v{i}" for i in range(16)] + [f"%u{i}" for i in range(16)]
    quads = [regs[4 * q: 4 * q + 4] for q in range(ilp)]
    body = ["  mov.u32 %i, 0;", "  mov.u32 %m, 0;", "$Lloop:", '  .pragma "nounroll";', *_chunk_addr(ilp, 16, mask),
            *load_trip("ld.global.cg.v4.u32", ilp, quads, "%x", 512, "%m")]
    body += ["  add.u32 %j, %j, %n;", "  add.u32 %i, %i, 1;", "  setp.lt.u32 %more, %i, %a;", "  @%more bra $Lloop;"]
    post = ["  setp.eq.u32 %p, %m, 0x7fffffff;", "  @%p st.global.u32 [%dst], %m;"]
    return _entry(spec.name, ["  .reg .b32 %u<16>;", *_warp_chunks(ilp, 16)], ["  mov.u32 %j, %c;"], body, post,
                  directives=(MAXNREG,), defer=True)


def cpasync_stream(spec: Spec) -> str:
    """All threads: ILP cp.async copies of ``size`` bytes per trip (the warp chunks of
    :func:`_warp_chunks`) into a ring of STAGES shared-memory slots laid out like the chunk
    (one commit group per trip, wait_group STAGES - 1 before a slot is reused)."""
    cop, size = CPA_VARIANTS[spec.params["variant"]]
    mask = spec.params["mask"]
    slot = STREAM_THREADS * ILP * size
    setup = [*_warp_chunks(ILP, size), f"  mul.lo.u32 %sa, %warp, {ILP * 32 * size};",
             f"  mad.lo.u32 %sa, %lane, {size}, %sa;", "  add.u32 %sa, %sa, %buf;"]
    body = ["  mov.u32 %i, 0;", "$Lloop:",
            f"  and.b32 %s, %i, {STAGES - 1};", f"  mad.lo.u32 %sb, %s, {slot}, %sa;", *_chunk_addr(ILP, size, mask)]
    for q in range(ILP):
        body.append(f"  cp.async.{cop}.shared.global [%sb+{q * 32 * size}], [%x+{q * 32 * size}], {size};")
    body += ["  cp.async.commit_group;", f"  cp.async.wait_group {STAGES - 1};",
             "  add.u32 %j, %j, %n;", "  add.u32 %i, %i, 1;",
             "  setp.lt.u32 %more, %i, %a;", "  @%more bra $Lloop;", "  cp.async.wait_group 0;"]
    return _entry(spec.name, setup, ["  mov.u32 %j, %c;"], body, [], defer=True)


GENERATORS = {"op": op_chain, "phase": phase_chain, "handshake": handshake, "cpasync": cpasync_chain,
              "sync": sync_chain, "tma_load": tma_load_chain, "ld": ld_chain, "tma_store": tma_store_chain,
              "tensor": tensor_chain, "tma_stream": tma_stream, "tma_store_stream": tma_store_stream,
              "ld_stream": ld_stream, "cpasync_stream": cpasync_stream}


SHARED_DECL = ".extern .shared .align 1024 .b8 smem[];\n"


def module_header(ptx_header: str) -> str:
    """The module header of the suite's kernels: the PTX header and the dynamic shared memory
    every kernel addresses."""
    return ptx_header + SHARED_DECL


def make_kernel(spec: Spec, header: str) -> Kernel:
    entry = GENERATORS[spec.kind](spec)
    return Kernel(spec.name, header, entry, variant=spec.kind, measure=spec.kind, length=spec.length,
                  smem=spec.smem, meta={"spec": spec})
