"""Numerics of the mma accumulation from small designed inputs (after Fasi et al.): are
subnormal inputs kept, and how does adding a product below one ulp of the accumulator round?

Each case places a few A, B, C elements (the rest zero) by the PTX reference fragment layout
(which the layout experiment of the same run checks) and reads D[0][0]. Interpretation is by
comparison with the exactly rounded alternatives, stated per case."""

from __future__ import annotations

import numpy as np

from gpudissect.catalog.tensor import element
from gpudissect.suites.tensor.layout_reference import Design, Shape, reference_layout

ULP1 = 2.0 ** -23  # f32 ulp of 1.0

# name -> (A[0][0], B[0][0], C[0][0], {outcome: D[0][0]}) ; None entries: not applicable
CASES: dict[str, tuple[float, float, float, dict[str, float]]] = {
    "product_0.75ulp_pos": (2.0 ** -12, 3 * 2.0 ** -13, 1.0,
                            {"rounded up (nearest or +inf)": 1 + ULP1, "truncated (toward zero or -inf)": 1.0}),
    "product_0.75ulp_neg": (-(2.0 ** -12), 3 * 2.0 ** -13, -1.0,
                            {"rounded away (nearest or -inf)": -(1 + ULP1), "truncated (toward zero or +inf)": -1.0}),
    "product_0.5ulp_tie": (2.0 ** -12, 2.0 ** -12, 1.0,
                           {"tie to even / truncated": 1.0, "tie away": 1 + ULP1}),
    "product_0.5ulp_tie_odd": (2.0 ** -12, 2.0 ** -12, 1 + ULP1,
                               {"tie to even (up)": 1 + 2 * ULP1, "tie down / truncated": 1 + ULP1}),
}


def cases_for(atype: str) -> dict[str, tuple[float, float, float, dict[str, float]]]:
    out = dict(CASES)
    v = element(atype).subnormal  # the smallest subnormal input (catalog/tensor.py)
    if v is not None:
        out["subnormal_input"] = (v, 1.0, 0.0, {"kept": v, "flushed to zero": 0.0})
    if atype in ("bf16", "tf32"):
        out["subnormal_product"] = (2.0 ** -70, 2.0 ** -70, 0.0, {"kept": 2.0 ** -140, "flushed to zero": 0.0})
    return out


def numerics_design(s: Shape, cases: dict) -> Design:
    ref = reference_layout(s)
    P = len(cases)
    a = np.zeros((P, 32, s.na))
    b = np.zeros((P, 32, s.nb))
    c = np.zeros((P, 32, s.nc))

    def at(op, r, col):
        lane, e = np.argwhere((ref[op][..., 0] == r) & (ref[op][..., 1] == col))[0]
        return int(lane), int(e)

    for p, (av, bv, cv, _) in enumerate(cases.values()):
        a[(p, *at("a", 0, 0))] = av
        b[(p, *at("b", 0, 0))] = bv
        c[(p, *at("c", 0, 0))] = cv
    return Design(a, b, c, [{"kind": "numerics", "case": k} for k in cases])


def interpret(s: Shape, cases: dict, out: np.ndarray) -> dict[str, dict]:
    ref = reference_layout(s)
    lane, e = np.argwhere((ref["c"][..., 0] == 0) & (ref["c"][..., 1] == 0))[0]
    res = {}
    for p, (name, (_, _, _, outcomes)) in enumerate(cases.items()):
        d = float(out[p, lane, e])
        match = [k for k, v in outcomes.items() if v == d]
        res[name] = {"d": d, "d_hex": float(d).hex(), "outcome": match[0] if match else "other",
                     "alternatives": {k: float(v).hex() for k, v in outcomes.items()}}
    return res
