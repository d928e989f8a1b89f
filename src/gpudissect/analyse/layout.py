"""Fragment layouts of mma.sync: the PTX reference layout (seed 004 / PTX ISA formulas) and
its check by experiment.

Experiment (one launch, one mma per warp, see ``generate.tensor.probe_kernel``): each probe
warp holds a one-hot A fragment (one element = 1, at lane l, element e) and a designed B:

* the "ones" pass (B = 1 everywhere): D is non-zero exactly in the row of that A element;
* "code" passes (B element = one base-``b`` digit of its own fragment index): D at (row, j)
  equals the code of the B element at (k of the A element, j).

Together they give triples (A slot, B slot, D slot) meaning A[i,k]*B[k,j] lands in D[i,j].
Rows, columns and k are only observable up to a relabelling (any permutation of rows of A
and D together gives the same products), so the check is: every triple agrees with the
reference labels (row(A) = row(D), k(A) = k(B), col(B) = col(D)) and every slot is covered.
A C pass (A = B = 0, C element = its index + 1) checks that D holds C slot for slot.

Slots are (lane, element) with element = register * elements_per_register + position
(lowest bits first), as the PTX ISA numbers a0, a1, ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# exact non-negative integer codes per type (largest value an element can hold exactly)
MAX_CODE = {"f16": 2048, "bf16": 256, "tf32": 2048, "f64": 1 << 20, "s8": 127, "u8": 255,
            "s4": 7, "u4": 15, "e4m3": 16, "e5m2": 8, "b1": 1}
BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f64": 64, "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8,
        "s4": 4, "u4": 4, "b1": 1, "f32": 32, "s32": 32}


def per_reg(t: str) -> int:
    """Elements per fragment register (f64: one per 64-bit register)."""
    return 1 if t == "f64" else 32 // BITS[t]


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    atype: str
    btype: str
    ctype: str

    @property
    def na(self) -> int:
        return self.m * self.k // 32

    @property
    def nb(self) -> int:
        return self.k * self.n // 32

    @property
    def nc(self) -> int:
        return self.m * self.n // 32


def reference_layout(s: Shape) -> dict[str, np.ndarray]:
    """(row, col) of every (lane, element) of A (row=i, col=k), B (row=k, col=j) and C/D
    (row=i, col=j): the PTX ISA layouts of the m16n8k* and m8n8k* shapes (not m8n8k4 f16)."""
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4
    ea, eb = per_reg(s.atype), per_reg(s.btype)
    a = np.zeros((32, s.na, 2), dtype=int)
    for i in range(s.na):
        r, p = divmod(i, ea)
        if s.m == 16:
            a[:, i, 0] = g + 8 * (r % 2)
            a[:, i, 1] = t * ea + p + (r // 2) * 4 * ea
        else:
            a[:, i, 0] = g
            a[:, i, 1] = t * ea + p + r * 4 * ea
    b = np.zeros((32, s.nb, 2), dtype=int)
    for i in range(s.nb):
        r, p = divmod(i, eb)
        b[:, i, 0] = t * eb + p + r * 4 * eb
        b[:, i, 1] = g
    c = np.zeros((32, s.nc, 2), dtype=int)
    for i in range(s.nc):
        c[:, i, 0] = g + 8 * (i // 2)
        c[:, i, 1] = t * 2 + i % 2
    return {"a": a, "b": b, "c": c}


def valid_layout(s: Shape, lay: dict[str, np.ndarray]) -> bool:
    """Every matrix element appears exactly once."""
    for op, (rows, cols) in (("a", (s.m, s.k)), ("b", (s.k, s.n)), ("c", (s.m, s.n))):
        idx = lay[op][..., 0] * cols + lay[op][..., 1]
        if sorted(idx.ravel().tolist()) != list(range(rows * cols)):
            return False
    return True


@dataclass
class Design:
    """Element values of every probe warp: a (P, 32, na), b (P, 32, nb), c (P, 32, nc)."""
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    passes: list[dict] = field(default_factory=list)  # per probe: {"kind", "a_slot", "digit"}
    base: int = 0
    digits: int = 0


def design(s: Shape) -> Design:
    base = MAX_CODE[s.btype] + 1
    nslots = 32 * s.nb
    digits = max(1, math.ceil(math.log(nslots, base))) if base > 1 else 0
    probes = []
    for kind, digit in [("ones", None)] + [("code", d) for d in range(digits)]:
        for lane in range(32):
            for e in range(s.na):
                probes.append({"kind": kind, "a_slot": (lane, e), "digit": digit})
    probes.append({"kind": "c", "a_slot": None, "digit": None})
    P = len(probes)
    a = np.zeros((P, 32, s.na))
    b = np.zeros((P, 32, s.nb))
    c = np.zeros((P, 32, s.nc))
    slot_index = np.arange(32 * s.nb).reshape(32, s.nb)
    for p, pr in enumerate(probes):
        if pr["kind"] == "c":
            c[p] = np.arange(32 * s.nc).reshape(32, s.nc) % MAX_CODE.get(s.ctype, 1 << 20) + 1
            continue
        lane, e = pr["a_slot"]
        a[p, lane, e] = 1
        if pr["kind"] == "ones":
            b[p] = 1
        else:
            b[p] = (slot_index // base ** pr["digit"]) % base
    return Design(a, b, c, probes, base, digits)


def simulate(s: Shape, lay: dict[str, np.ndarray], d: Design) -> np.ndarray:
    """What an mma with layout ``lay`` returns for the design: D elements (P, 32, nc)."""
    P = d.a.shape[0]
    out = np.zeros((P, 32, s.nc))
    la, lb, lc = lay["a"], lay["b"], lay["c"]
    for p in range(P):
        A = np.zeros((s.m, s.k))
        B = np.zeros((s.k, s.n))
        C = np.zeros((s.m, s.n))
        A[la[..., 0], la[..., 1]] = d.a[p]
        B[lb[..., 0], lb[..., 1]] = d.b[p]
        C[lc[..., 0], lc[..., 1]] = d.c[p]
        D = A @ B + C
        out[p] = D[lc[..., 0], lc[..., 1]]
    return out


@dataclass
class LayoutCheck:
    matches: bool
    triples: int
    differences: list[str]
    coverage_ok: bool
    c_identity: bool

    def to_json(self) -> dict:
        return {"matches_reference": self.matches, "triples": self.triples,
                "n_differences": len(self.differences), "differences": self.differences[:20],
                "coverage_ok": self.coverage_ok, "c_to_d_identity": self.c_identity}


def infer_triples(s: Shape, d: Design, out: np.ndarray) -> tuple[list[tuple], list[str]]:
    """(A slot, B slot, D slot) triples from the measured D of every probe."""
    problems: list[str] = []
    ones = {pr["a_slot"]: p for p, pr in enumerate(d.passes) if pr["kind"] == "ones"}
    codes: dict[tuple, dict[int, int]] = {}
    for p, pr in enumerate(d.passes):
        if pr["kind"] == "code":
            codes.setdefault(pr["a_slot"], {})[pr["digit"]] = p
    triples = []
    for a_slot, p in ones.items():
        nz = np.argwhere(out[p] != 0)
        if len(nz) != s.n:
            problems.append(f"A{a_slot}: {len(nz)} D elements touched, {s.n} expected (one row)")
        for lane, e in nz:
            code = 0
            for dig, q in codes.get(a_slot, {}).items():
                v = out[q, lane, e]
                if v != int(v) or not 0 <= v < d.base:
                    problems.append(f"A{a_slot}: D({lane},{e}) = {v} is not a code")
                    v = 0
                code += int(v) * d.base ** dig
            if code >= 32 * s.nb:
                problems.append(f"A{a_slot}: code {code} out of range")
                continue
            triples.append((a_slot, divmod(code, s.nb), (int(lane), int(e))))
    return triples, problems


def check(s: Shape, d: Design, out: np.ndarray, ref: dict[str, np.ndarray] | None = None) -> LayoutCheck:
    ref = ref or reference_layout(s)
    triples, diffs = infer_triples(s, d, out)
    la, lb, lc = ref["a"], ref["b"], ref["c"]
    for (al, ae), (bl, be), (dl, de) in triples:
        ai, ak = la[al, ae]
        bk, bj = lb[bl, be]
        di, dj = lc[dl, de]
        if ai != di:
            diffs.append(f"A({al},{ae}) row {ai} but lands in D({dl},{de}) row {di}")
        if ak != bk:
            diffs.append(f"A({al},{ae}) k={ak} multiplies B({bl},{be}) k={bk}")
        if bj != dj:
            diffs.append(f"B({bl},{be}) col {bj} lands in D({dl},{de}) col {dj}")
    seen_b = {t[1] for t in triples}
    coverage = len(triples) == s.m * s.n * s.k and len(seen_b) == 32 * s.nb
    if not coverage:
        diffs.append(f"coverage: {len(triples)} products seen of {s.m * s.n * s.k}, "
                     f"{len(seen_b)} B elements of {32 * s.nb}")
    cp = next(p for p, pr in enumerate(d.passes) if pr["kind"] == "c")
    c_id = bool(np.array_equal(out[cp], d.c[cp]))
    if not c_id:
        diffs.append("D does not hold C element for element when A = B = 0")
    return LayoutCheck(not diffs, len(triples), diffs, coverage, c_id)


# --- packing element values into fragment words -------------------------------------------

def encode(t: str, vals: np.ndarray) -> np.ndarray:
    """Element values (exact small integers) -> unsigned bit patterns of type ``t``."""
    v = np.asarray(vals, dtype=np.float64)
    if t == "f16":
        return v.astype(np.float16).view(np.uint16).astype(np.uint64)
    if t == "bf16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint64)
    if t in ("tf32", "f32"):
        return v.astype(np.float32).view(np.uint32).astype(np.uint64)
    if t == "f64":
        return v.astype(np.float64).view(np.uint64)
    mask = (1 << BITS[t]) - 1
    return (v.astype(np.int64) & mask).astype(np.uint64)


def decode(t: str, words: np.ndarray) -> np.ndarray:
    """D fragment words of type ``t`` (u32 words; f64 as word pairs) -> element values."""
    w = np.asarray(words, dtype=np.uint32)
    if t == "f32":
        return w.view(np.float32).astype(np.float64)
    if t == "s32":
        return w.view(np.int32).astype(np.float64)
    if t == "f16":
        return w.view(np.uint16).view(np.float16).astype(np.float64).reshape(*w.shape[:-1], -1)
    if t == "f64":
        return w.reshape(*w.shape[:-1], -1, 2).copy().view(np.uint64).view(np.float64)[..., 0]
    raise ValueError(f"cannot decode D type {t}")


def pack(t: str, vals: np.ndarray) -> np.ndarray:
    """(…, n elements) of type t -> (…, words) u32 words (elements low bits first)."""
    bits = encode(t, vals)
    if t == "f64":
        return np.ascontiguousarray(bits).view(np.uint32)
    e = per_reg(t)
    b = bits.reshape(*vals.shape[:-1], -1, e)
    shifts = (np.arange(e, dtype=np.uint64) * BITS[t]).astype(np.uint64)
    return (b << shifts).sum(axis=-1).astype(np.uint32)

