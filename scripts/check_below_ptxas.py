"""The stall sweep below ptxas (issue 35): every latency_hw record of a database's latest
instructions run, one line each with where its kernels and input sets came from (see
scripts/check_below_ptxas.sh), then the audit's check of them, the study's conclusions and any
throughput point over its pipe limit (the rate regions of at least 32 instances per chain).

    python3 scripts/check_below_ptxas.py DB
"""

import sys

from gpudissect.audit import check_hw_latency
from gpudissect.store.db import Store
from gpudissect.suites.instructions.studies.stall_patch import MEASURE, conclusions


def sweep_text(sweep: list[dict]) -> str:
    """stall:ok|wrong|error:cycles per instance, largest stall first."""
    out = []
    for d in sweep:
        state = "ok" if d.get("correct") is True else "wrong" if d.get("correct") is False else "error"
        c = d.get("cycles_per_instance")
        out.append(f"{d['stall']}:{state}:{'-' if c is None else f'{c:.3g}'}")
    return " ".join(out) or "-"


def main(db: str) -> int:
    store = Store(db)
    runs = [r for r in store.runs() if r["suite"] == "instructions"]
    if not runs:
        print(f"{db}: no instructions run")
        return 1
    rid = max(r["id"] for r in runs)
    recs = [dict(r) for r in store.results(rid)]
    hw = sorted((r for r in recs if r["measure"] == MEASURE), key=lambda r: r["variant"])
    print(f"run {rid}: {len(recs)} records, {len(hw)} {MEASURE}")
    print(f"{'variant':24s} {'value':>5s} {'ptxas':>5s} {'O3':>7s}  sweep | flags")
    for r in hw:
        p = r.get("params") or {}
        o3 = p.get("latency_o3")
        val = "-" if r.get("value") is None else f"{r['value']:g}"
        print(f"{r['variant']:24s} {val:>5s} {str(p.get('ptxas_stall', '-')):>5s} "
              f"{'-' if o3 is None else f'{o3:.3f}':>7s}  {sweep_text(p.get('sweep') or [])} | "
              f"{p.get('opcode', '-')} sb={p.get('scoreboard')} | {[f[:90] for f in r.get('flags') or []]}")
        for s in r.get("sass") or []:
            print(f"{'':24s} {s}")
        print(f"{'':24s} kernels: {p.get('kernels')}; input sets {p.get('input_sets')} of "
              f"{p.get('input_sets_tried')} tried; held {p.get('held_cycles')}"
              + (f"; edges tried {p['edges_tried']}" if p.get("edges_tried") else ""))
    problems = check_hw_latency(recs)
    print("audit:", "no problem" if not problems else "")
    for line in problems:
        print(" ", line)
    for line in conclusions(recs):
        print(line)
    # the rate regions of at least 32 instances per chain: any throughput point over its pipe limit
    for r in recs:
        if r["measure"] == "throughput" and any(f.startswith("exceeds-limit") for f in r.get("flags") or []):
            p = r.get("params") or {}
            print(f"over the limit: {r['variant']} {p.get('chains')} chains x {p.get('warps')} warps, lengths "
                  f"{p.get('lengths')}: {r['value']:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
