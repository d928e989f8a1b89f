"""Prints what scripts/check_hB.sh's runs produced (issue 33 a, b, c): python3 scripts/check_hB.py DIR
with DIR/a.db (async), DIR/i.db (instructions), DIR/b.db (behaviour)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpudissect.store.db import Store


def _records(db: Path) -> tuple[list[dict], dict]:
    if not db.exists():
        print(f"  (no database {db.name}: the run did not start)")
        return [], {}
    st = Store(db)
    runs = list(st.runs())
    if not runs:
        return [], {}
    rid = runs[-1]["id"]
    out = []
    for r in st.results(rid):
        d = dict(r)
        for k in ("params", "fit", "samples", "flags"):
            if isinstance(d.get(k), str):
                d[k] = json.loads(d[k])
        out.append(d)
    return out, st.get_meta(f"summary:{rid}") or {}


def async_part(d: Path) -> None:
    recs, summ = _records(d / "a.db")
    print("\n== (a) plain-load baseline bw:ld.v4:dram: GB/s per ILP x CTAs/SM (8 warps per CTA)")
    for r in recs:
        if r["variant"] == "bw:ld.v4:dram":
            cfg = (r.get("samples") or {}).get("configs") or {}
            for k, c in sorted(cfg.items()):
                what = c.get("refused") or c.get("error") or (
                    f"window {c['gbps']:.0f} GB/s start_lag={c.get('start_lag')} per-rep medians "
                    f"{[round(x) for x in (c.get('reps') or [[]])[0]]} all_at_once={c.get('all_at_once')}")
                print(f"  {k:14s} {what} {c.get('flag', '')}")
            print("  saturation:", json.dumps((r.get("fit") or {}).get("saturation")))
            print("  sass:", json.dumps((r.get("fit") or {}).get("sass")))
            print("  flags:", r.get("flags"))
    for r in recs:
        if r["variant"].startswith(("bw:tma.bulk:dram:", "bw:cp.async")):
            sat = (r.get("fit") or {}).get("saturation") or {}
            best = ((r.get("samples") or {}).get("configs") or {}).get(str(sat.get("at"))) or {}
            print(f"  {r['variant']:24s} {r['value']} GB/s at {sat.get('at')} CTAs/SM saturated={sat.get('saturated')} "
                  f"start_lag={best.get('start_lag')} flags={r.get('flags')}")
    for c in summ.get("conclusions") or []:
        if "DRAM read" in c:
            print("  CONCLUSION:", c)


def instr_part(d: Path) -> None:
    recs, _ = _records(d / "i.db")
    print("\n== (b) fma.rn.f32 read-read against its control")
    for r in recs:
        if r["variant"] == "fma.rn.f32" and r["measure"] in ("latency_read_read", "control_read_read"):
            p = r.get("params") or {}
            print(f"  {r['measure']}: {r['value']} cycles flags={r.get('flags')}")
            for k in ("lengths", "shared_slots", "reuse_fraction", "bank_pattern", "bank_parities",
                      "moves_per_instance", "one_warp", "verdict"):
                if k in p:
                    print(f"    {k}: {json.dumps(p[k])}")
            if "over_warps" in p:
                print(f"    over_warps verdict: {p['over_warps'].get('verdict')} differ={p['over_warps'].get('differ')}")


def behaviour_part(d: Path) -> None:
    recs, summ = _records(d / "b.db")
    print("\n== (c) DFMA solo and its pairs")
    for r in recs:
        if r["variant"].startswith("pipes:") and "fma.rn.f64" in r["variant"]:
            fit = r.get("fit") or {}
            print(f"  {r['variant']}: {r['value']} flags={r.get('flags')}")
            if "register_reads" in fit:
                print("    register_reads:", fit["register_reads"])
                for ln in fit.get("launches") or []:
                    print("    configs:", {k: round(v["rate"], 4) for k, v in (ln.get("configs") or {}).items()
                                           if v.get("rate")}, "saturated", ln.get("saturated"), "rise", ln.get("rise"))
    for c in summ.get("conclusions") or []:
        if c.startswith(("pipes", "issue limit")):
            print("  CONCLUSION:", c[:3000])
    print("  verdicts:", json.dumps({k: v.get("verdict") for k, v in ((summ.get("pipes") or {}).get("pairs") or {}).items()
                                      if "fma.rn.f64" in k}))
    print("  short solos:", (summ.get("pipes") or {}).get("short_solos"))


def main(d: str) -> None:
    for part in (async_part, instr_part, behaviour_part):
        try:
            part(Path(d))
        except Exception as e:  # one part's failure must not hide the others
            print(f"  {part.__name__}: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main(sys.argv[1])
