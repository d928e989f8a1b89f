"""The autonomic loop: generate, compile, disassemble, verify; on failure try the next strategy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from gpudissect.arch.target import Target
from gpudissect.catalog.model import Variant
from gpudissect.kernel.build import Built, build_module
from gpudissect.kernel.control import attach, controls_of, instance_stalls, region_stalls
from gpudissect.kernel.parallel import pimap
from gpudissect.kernel.ptx import Kernel
from gpudissect.kernel.toolchain import PtxasError
from gpudissect.suites.instructions.checks import CheckResult, Sample, check_family
from gpudissect.suites.instructions.registers import register_map
from gpudissect.suites.instructions.strategies import Strategy, default_order
from gpudissect.suites.instructions.template import GenerationError, generate

VERIFY_LENGTHS = (4, 8, 12)


@dataclass
class Attempt:
    strategy: str
    ok: bool
    reason: str = ""


@dataclass
class MapRecord:
    """One row of the PTX->SASS map (the stable JSON interface of ``gpudissect map``)."""

    variant: str
    arch: str
    verified: bool
    sass: list[str]
    strategy: str | None
    reason: str | None = None
    status: str = "verified"  # verified | unverified | unsupported | error
    cls: str = ""
    sass_counts: dict[str, str] = field(default_factory=dict)
    moves_per_instance: float = 0.0
    depth_per_instance: float = 0.0
    glue: str | None = None
    companion: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    ptx_example: str = ""
    # PTX operand -> the SASS registers carrying its PTX register (registers.py, thesis 4.3)
    registers: dict[str, dict] = field(default_factory=dict)
    # ptxas's static schedule: the stall count (control codes, kernel/control.py) of each SASS
    # instruction of one instance, the median over the timed region of the longest kernel
    stalls: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        d = asdict(self)
        if d["reason"] is None:
            d.pop("reason")
        return d


def _family(variant: Variant, strategy: Strategy, target: Target, prefix: str, chains: int = 1,
            lengths: tuple[int, ...] = VERIFY_LENGTHS) -> list[Kernel]:
    return [generate(variant, strategy, target, chains=chains, length=n, reps=2, name=f"{prefix}_n{n}")
            for n in lengths]


def check_built(variant: Variant, strategy: Strategy, builts: list[Built],
                paired: Callable[[str], bool] | None = None) -> CheckResult:
    """The SASS check of one family (``paired``: the two-lane opcodes that may hold two
    instances; None where a family must hold one instruction per instance, as in the map)."""
    samples = [Sample(units=b.kernel.units, length=b.kernel.length, region=b.region) for b in builts]
    min_real = 2 if strategy.chain == "companion" else 1
    # a warp-collective instruction may bring ptxas's convergence guard (kernel/region.FULL_KINDS)
    allow = variant.allow + (("convergence",) if variant.warp_collective else ())
    res = check_family(samples, allow=allow, check_depth=variant.chain_operand is not None,
                       min_real=min_real, paired=paired, expect=variant.expect)
    if res.ok:
        stalled = compiler_stalls(builts[-1])
        if stalled:
            res.ok, res.reason = False, stalled
    return res


def compiler_stalls(b: Built) -> str | None:
    """Why the timed region's schedule is ptxas's conservative one rather than the hardware's
    (stall counts of 15 on most of its work: what -O0 emits), or None."""
    try:
        pairs = attach(b.region, controls_of(b.cubin, b.kernel.name))
    except (KeyError, ValueError) as e:
        return f"control codes unreadable: {e}"
    st = region_stalls(pairs)
    if st["compiler_stalled"]:
        n15 = round(st["stall15_fraction"] * st["work"])  # of the work judged, not of the fillers
        return (f"compiler-imposed stalls: {n15} of the region's {st['work']} instructions carry "
                "ptxas's stall count of 15 (an unoptimised schedule, not the hardware's latency)")
    return None


def verify_family(
    variant: Variant,
    strategy: Strategy,
    target: Target,
    chains: int = 1,
    lengths: tuple[int, ...] = VERIFY_LENGTHS,
) -> tuple[CheckResult, list[Built]]:
    """Compile a variant at several lengths with one strategy (one module) and check the family."""
    kernels = _family(variant, strategy, target, "bench", chains, lengths)
    built = build_module(kernels, target.arch, strategy.opt)
    for b in built.values():
        if isinstance(b, Exception):
            raise b
    builts = [built[k.name] for k in kernels]  # type: ignore[misc]
    return check_built(variant, strategy, builts), builts


def _record_pass(rec: MapRecord, strat: Strategy, res: CheckResult, builts: list[Built]) -> None:
    rec.verified = True
    rec.status = "verified"
    rec.strategy = strat.name
    rec.sass = res.sass
    rec.sass_counts = res.sass_counts
    rec.moves_per_instance = float(res.moves_per_unit)
    rec.depth_per_instance = float(res.depth_per_instance)
    rec.glue = builts[0].kernel.meta["glue"]
    rec.companion = builts[0].kernel.meta["companion"]
    rec.reason = None
    rec.ptx_example = builts[0].kernel.entry


def _finish(rec: MapRecord) -> MapRecord:
    if rec.status in ("verified", "unsupported"):
        return rec
    failed = [a for a in rec.attempts if not a.ok]
    rec.reason = "; ".join(f"{a.strategy}: {a.reason}" for a in failed) or "no strategy applies"
    if failed and all(a.reason.startswith("ptxas failed") for a in failed):
        rec.status = "error"
    return rec


def _verify_chunk(job: tuple[Strategy, list[tuple[Variant, list[Kernel], MapRecord]], str]) -> list[MapRecord]:
    """One strategy on one chunk of variants (one module; in a worker process): each variant's
    record with this strategy's attempt added, and filled in when it verifies."""
    strat, chunk, arch = job
    if not chunk:
        return []
    kernels = [k for _, ks, _ in chunk for k in ks]
    try:
        built = build_module(kernels, arch, strat.opt)
    except PtxasError as e:
        if len(chunk) > 1:  # isolate the variant that does not assemble
            return [r for item in chunk for r in _verify_chunk((strat, [item], arch))]
        rec = chunk[0][2]
        rec.attempts.append(Attempt(strat.name, False, str(e)))
        if e.unsupported:
            rec.status = "unsupported"
            rec.reason = f"ptxas: {e.message.splitlines()[0][:200]}"
        return [rec]
    for v, ks, rec in chunk:
        bs = [built[k.name] for k in ks]
        bad = next((b for b in bs if isinstance(b, Exception)), None)
        if bad is not None:
            rec.attempts.append(Attempt(strat.name, False, str(bad)))
            continue
        res = check_built(v, strat, bs)  # type: ignore[arg-type]
        rec.attempts.append(Attempt(strat.name, res.ok, res.reason))
        if res.ok:
            _record_pass(rec, strat, res, bs)  # type: ignore[arg-type]
            rec.registers = register_map(v, bs[0])
            rec.stalls = instance_stalls(bs[-1].region, bs[-1].cubin, bs[-1].kernel.name, rec.sass_counts)  # type: ignore[arg-type]
        elif not rec.sass:
            rec.sass = res.sass
            rec.sass_counts = res.sass_counts
    return [rec for _, _, rec in chunk]


MODULE_VARIANTS = 24  # variants per module in a batch round (at most: fewer where the workers would idle)


def _generate_and_verify(job: tuple[Strategy, list[tuple[Variant, MapRecord, str]], Target]) -> list[MapRecord]:
    """:func:`_verify_chunk` of variants whose kernels are generated here, in the worker (the
    generation is Python that would otherwise hold the parent, which may be measuring); a
    variant the strategy does not apply to gets the attempt that says why."""
    strat, items, target = job
    chunk, out = [], []
    for v, rec, prefix in items:
        try:
            chunk.append((v, _family(v, strat, target, prefix), rec))
        except GenerationError as e:
            rec.attempts.append(Attempt(strat.name, False, f"not applicable: {e}"))
            out.append(rec)
        except Exception as e:  # a generator bug on one variant must not stop the others
            rec.attempts.append(Attempt(strat.name, False, f"generator error: {type(e).__name__}: {e}"))
            out.append(rec)
    return out + _verify_chunk((strat, chunk, target.arch))


def autoverify_many(
    variants: list[Variant],
    target: Target,
    strategies: list[Strategy] | None = None,
    jobs: int = 4,
    progress=None,
) -> list[MapRecord]:
    """Autoverify many variants: each strategy round compiles the pending variants in batched
    modules (in parallel processes); what fails moves on to the next strategy."""
    arch = target.arch
    recs = {v.name: MapRecord(variant=v.name, arch=arch, verified=False, sass=[], strategy=None,
                              status="unverified", cls=v.cls) for v in variants}
    pending: list[Variant] = []
    for v in variants:
        if not v.supported_on(target.sm):
            recs[v.name].status = "unsupported"
            recs[v.name].reason = f"needs sm_{v.min_sm} or newer"
            if progress:
                progress(recs[v.name])
        else:
            pending.append(v)

    for strat in strategies or default_order():
        if not pending:
            break
        items = [(v, recs[v.name], f"v{i}") for i, v in enumerate(pending)]
        per = max(1, min(MODULE_VARIANTS, -(-len(items) // max(jobs, 1))))  # every worker busy
        chunks = [items[i : i + per] for i in range(0, len(items), per)]
        jobs_in = [(strat, c, target) for c in chunks]
        for done in pimap(_generate_and_verify, jobs_in, jobs):  # progress as each chunk comes back
            recs.update({r.variant: r for r in done})
            for r in done:
                if progress and r.status in ("verified", "unsupported"):
                    progress(_finish(r))
        pending = [v for v in pending if recs[v.name].status not in ("verified", "unsupported")]
    for v in pending:
        if progress:
            progress(_finish(recs[v.name]))
    return [_finish(recs[v.name]) for v in variants]


def autoverify(variant: Variant, target: Target, strategies: list[Strategy] | None = None) -> MapRecord:
    """Try strategies in order until the SASS verifies; record what happened with each."""
    return autoverify_many([variant], target, strategies, jobs=1)[0]
