"""The memory suite's stated conclusions (issue 22): store latencies (round trip and seed 000's
one-store span), shared throughput per access width, and the bank count and width from the
conflict sweep. GPU-free, on synthetic records with known answers."""

from __future__ import annotations

import pytest

from gpudissect.suites.memory import analyse as am
from gpudissect.suites.memory import bandwidth as bwm
from gpudissect.suites.memory.plan import Plan
from gpudissect.suites.memory.suite import item_names

STRIDES = Plan().bank_strides


def bank_records(banks: int, bank_bytes: int, strides=STRIDES, widths=(4, 8, 16),
                 base=20.0, per=2.0) -> list[dict]:
    """The probes' records as a GPU with ``banks`` banks of ``bank_bytes`` would give them:
    cycles = base (+ 6 per width step) + per x the true conflict degree."""
    out = []
    for i, w in enumerate(widths):
        for k in strides:
            s = k * w
            deg = am.bank_degrees(s, w, banks=banks, bank_bytes=bank_bytes)["degree_warp"]
            out.append({"variant": f"bank/w{8 * w}", "measure": "cycles_per_access",
                        "value": base + 6 * i + per * deg, "flags": [],
                        "params": {"stride_bytes": s, "width_bytes": w,
                                   **am.bank_degrees(s, w)}})  # labelled with the default model
    return out


@pytest.mark.parametrize("banks,bank_bytes", [(32, 4), (16, 8), (64, 4), (32, 8)])
def test_bank_geometry_recovers_the_generating_geometry(banks, bank_bytes):
    g = am.bank_geometry(bank_records(banks, bank_bytes))
    assert (g["banks"], g["bank_bytes"]) == (banks, bank_bytes)
    assert g["limit_bytes_per_cycle"] == banks * bank_bytes
    assert g["max_residual"] < 1e-6 and g["runner_up"]["max_residual"] >= am.GEOMETRY_MIN_RESID
    (line,) = am.bank_conclusion(g)
    assert line.startswith(f"Shared memory has {banks} banks of {bank_bytes} bytes")


def test_bank_pattern_repeats_at_the_bank_row():
    g = am.bank_geometry(bank_records(32, 4))
    rep = {(r["width"], r["stride_bytes"], r["repeat_stride_bytes"]) for r in g["repeats"]}
    assert ("w32", 4, 132) in rep and ("w32", 4, 260) in rep  # stride 33 and 65 words cost as 1
    assert all(r["repeat_stride_bytes"] - r["stride_bytes"] in (128, 256) for r in g["repeats"])
    assert "repeats every 128 B" in am.bank_conclusion(g)[0]


def test_bank_geometry_is_ambiguous_without_telling_strides():
    # strides of 0, 1 and 32 words only: 32 x 4 B and 16 x 8 B predict the same degrees
    g = am.bank_geometry(bank_records(32, 4, strides=(0, 1, 32), widths=(4,)))
    assert g["banks"] is None and [32, 4] in g["ambiguous"] and [16, 8] in g["ambiguous"]
    assert "not determined" in am.bank_conclusion(g)[0]
    assert am.bank_geometry([])["banks"] is None


def test_bank_geometry_noise_does_not_hide_a_clear_answer():
    recs = bank_records(32, 4)
    for i, r in enumerate(recs):
        r["value"] += 0.05 * ((-1) ** i)  # measurement noise well below a conflict's 2 cycles
    g = am.bank_geometry(recs)
    assert (g["banks"], g["bank_bytes"]) == (32, 4)


def test_the_conflict_rule_uses_the_measured_geometry():
    s = am.summarize(bank_records(16, 8))
    assert (s["banks"], s["bank_bytes"]) == (16, 8)
    fit = s["bank_conflicts"]["w32"]["fit"]
    assert fit["degree_warp"]["r2"] == pytest.approx(1.0)  # degrees of 16 x 8 B, not the labels'


def lat_records(lat: dict[str, float]) -> list[dict]:
    return [{"variant": f"latency/{k}", "measure": "latency", "value": v, "flags": [], "params": {}}
            for k, v in lat.items()]


def span_record(path: str, span: float, empty: float) -> dict:
    return {"variant": f"store_span/{path}", "measure": "span", "value": span, "flags": [],
            "params": {"empty_span": empty}}


def test_store_latencies_both_methods():
    recs = lat_records({"ld.shared": 23.0, "st.shared+ld.shared": 28.0, "ld.global.cv": 280.0,
                        "st.global+ld.global": 295.0})
    recs += [span_record("st.shared", 8.5, 2.0), span_record("st.global", 2.0, 2.0)]
    s = am.summarize(recs)
    st = s["store_latency"]
    assert st["st.shared"]["round_trip_extra"] == pytest.approx(5.0)
    assert st["st.global"]["round_trip_extra"] == pytest.approx(15.0)
    assert st["st.shared"]["span"] == 8.5 and st["st.shared"]["span_over_empty"] == pytest.approx(6.5)
    assert st["st.global"]["span_over_empty"] == 0.0
    lines = [c for c in s["conclusions"] if "store latency" in c]
    assert len(lines) == 2 and "waits +5.0 cycles" in lines[0] and "seed 000's method" in lines[0]
    assert "broken" not in " ".join(lines)


def test_store_round_trip_below_the_load_is_called_broken():
    st = am.store_latencies({"ld.shared": 23.0, "st.shared+ld.shared": 20.0}, [])
    assert st["st.shared"]["round_trip_extra"] == -3.0
    assert "the method is broken" in am._store_conclusion(st)[0]
    assert am.store_latencies({"ld.shared": 23.0}, []) == {}  # no round trip measured: nothing stated


def bw_point(level: str, bits: int, ilp: int, warps: int, bpc: float, flags=()) -> dict:
    return {"variant": f"bwconfig/{level}", "measure": "bandwidth", "value": bpc * 250.0,
            "flags": list(flags), "params": {"bits": bits, "ilp": ilp, "warps": warps,
                                             "bytes_per_cycle_per_sm": bpc}}


def saturating(level: str, bits: int, top: float) -> list[dict]:
    """Rate rising with bytes in flight until ``top``, then flat."""
    return [bw_point(level, bits, i, w, min(top, top * i * w / 32)) for i in (1, 2, 4, 8) for w in (4, 8, 16, 32)]


def test_shared_throughput_per_width():
    recs = saturating("shared/read", 32, 100.0) + saturating("shared/read", 128, 127.0)
    recs += saturating("shared/write", 64, 126.0)
    recs.append(bw_point("shared/read", 64, 1, 4, 30.0))  # only one configuration
    pw = {lv: bwm.per_width(recs, lv) for lv in bwm.PER_WIDTH_LEVELS}
    assert pw["shared/read"]["32"]["bytes_per_cycle_per_sm"] == 100.0
    assert pw["shared/read"]["128"]["bytes_per_cycle_per_sm"] == 127.0
    assert pw["shared/read"]["32"]["evidence"].startswith("saturated") and pw["shared/read"]["32"]["flag"] is None
    assert pw["shared/read"]["64"]["flag"].startswith("not-saturated")  # nothing to show the rate stopped
    assert list(pw["shared/write"]) == ["64"]
    lines = am._per_width_conclusion({"per_width": pw}, {"banks": 32, "bank_bytes": 4, "limit_bytes_per_cycle": 128})
    assert lines[0].startswith("Shared read throughput per access width") and "32-bit 100.0" in lines[0]
    assert "128 B/clk/SM" in lines[0] and "ABOVE" not in lines[0]


def test_shared_throughput_above_the_banks_bound_is_a_method_error():
    pw = {"shared/read": bwm.per_width(saturating("shared/read", 128, 200.0), "shared/read")}
    (line,) = am._per_width_conclusion({"per_width": pw}, {"banks": 32, "bank_bytes": 4,
                                                            "limit_bytes_per_cycle": 128})
    assert "128-bit ABOVE it (a method error)" in line


def test_new_probes_are_items_of_the_suite_and_reach_the_timing_reference():
    from gpudissect.report.assemble.timing_reference import timing_reference
    from gpudissect.report.read.metrics import lookup
    from gpudissect.report.read.results import ResultSet

    names = item_names(Plan())
    assert {"latency/st.global+ld.global", "store_span/st.shared", "store_span/st.global"} <= set(names)
    recs = bank_records(32, 4) + lat_records({"ld.shared": 23.0, "st.shared+ld.shared": 28.0})
    recs += [span_record("st.shared", 8.5, 2.0)] + saturating("shared/write", 128, 127.5)
    rs = ResultSet("gpu", "test", docs={"memory": {"records": recs, "summary": am.summarize(recs)}})
    assert lookup(rs, "smem_banks").value == 32 and lookup(rs, "smem_bank_bytes").value == 4
    assert lookup(rs, "smem_st_latency").value == 8.5
    assert lookup(rs, "smem_st_roundtrip").value == pytest.approx(5.0)
    assert lookup(rs, "smem_write_128").value == 127.5 and lookup(rs, "smem_read_32") is None
    md = timing_reference(rs)
    assert "| shared memory banks | 32 |" in md and "| shared write throughput, 128-bit accesses | 127.5 |" in md


def test_the_report_shows_the_stated_quantities():
    from gpudissect.suites.memory.view import stated_table

    recs = bank_records(32, 4) + lat_records({"ld.shared": 23.0, "st.shared+ld.shared": 28.0})
    recs += [span_record("st.shared", 8.5, 2.0)] + saturating("shared/read", 64, 127.0)
    t = stated_table(am.summarize(recs))
    labels = [r[0] if isinstance(r[0], str) else r[0].text for r in t.rows]
    assert labels == ["banks", "bank width", "st.shared (one store alone)", "st.shared -> dependent load",
                      "shared/read 64-bit"]
    assert stated_table({}) is None
