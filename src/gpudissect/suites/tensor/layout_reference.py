"""Fragment layouts of mma.sync / mma.sp: the PTX reference layout (seed 004 / PTX ISA
formulas) and its check by experiment.

Experiment (one launch, one mma per warp, see ``kernels.probe_kernel``): each probe
warp holds a one-hot A fragment (one element = 1, at lane l, element e) and a designed B:

* the "ones" pass (B = 1 everywhere): D is non-zero exactly in the row of that A element;
* "code" passes (B element = one base-``b`` digit of its own fragment index): D at (row, j)
  equals the code of the B element at (k of the A element, j).

Together they give triples (A slot, B slot, D slot) meaning A[i,k]*B[k,j] lands in D[i,j].
Rows, columns and k are only observable up to a relabelling (any permutation of rows of A
and D together gives the same products), so the check is: every triple agrees with the
reference labels (row(A) = row(D), k(A) = k(B), col(B) = col(D)) and every slot is covered.
A C pass (A = B = 0, C element = its index + 1) checks that D holds C slot for slot.

The same experiment covers the other mma forms (``Shape`` fields):

* ``sp_meta`` (mma.sp): A is the compressed M x K/2 matrix; with one metadata word in every
  thread (the same nibble everywhere) compressed column c stands for logical column
  ``sparse_k(c)``, so the reference labels an A slot with its row and its LOGICAL k (the
  PTX sparse A layout = the dense A layout of the M x K/2 shape, mapped through the
  metadata); B, C, D are the dense ones. Only B elements at selected k take part.
* ``groups`` = 4 (m8n8k4 .f16): four independent 8x8x4 products, one per quad-pair; modelled
  as block-diagonal matrices (group q at rows/columns q*M, q*K / q*K, q*N / q*M, q*N), so
  a product that crossed quad-pairs shows up as a row or k mismatch. ``alayout`` /
  ``blayout`` (.row / .col) select the PTX A and B fragments.
* ``bop`` = "xor" (b1 .xor.popc): D = C + popc(A xor B) = |A row| + |B col| - 2 A.B; the
  design adds, for each B pattern, a probe with A = 0 (``base``), and ``products`` turns D
  back into A.B (see there). b1 .and.popc is the plain product of 0/1 matrices.

Slots are (lane, element) with element = register * elements_per_register + position
(lowest bits first), as the PTX ISA numbers a0, a1, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpudissect.catalog.tensor import element

# Element types (catalog/tensor.py): bits, elements per fragment register (f64: one per 64-bit
# register), the exact non-negative integer codes (0..max_code) the experiment uses, and the
# mma.sp metadata unit (PTX ISA "Sparse matrix storage"): a nibble holds two 2-bit indices
# (low bits first) of the kept units among 4 consecutive units of an A row. A unit is one
# element for 16-bit and 8-bit types, half a tf32 element (0b0100 / 0b1110 keep tf32 element
# 0 / 1 of a pair) and a pair of 4-bit elements (4:8 sparsity in pairs).

# m8n8k4 .f16 (PTX ISA, "Matrix Fragments for mma.m8n8k4"): (row, col) of element i in lane
# t = %laneid % 4 of the low (hi = 0, lanes < 16) or high (hi = 1) half of a quad-pair,
# per operand and .row/.col layout (A, B) or accumulator type (C/D)
QUADPAIR = {
    ("a", "row"): lambda i, t, hi: (t + 4 * hi, i),
    ("a", "col"): lambda i, t, hi: (i + 4 * hi, t),
    ("b", "row"): lambda i, t, hi: (t, i + 4 * hi),
    ("b", "col"): lambda i, t, hi: (i, t + 4 * hi),
    ("c", "f16"): lambda i, t, hi: (t + 4 * hi, i),
    ("c", "f32"): lambda i, t, hi: ((t & 1) + (i & 2) + 4 * hi, (i & 4) + (t & 2) + (i & 1)),
}


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    atype: str
    btype: str
    ctype: str
    groups: int = 1  # independent m x n x k products per warp (m8n8k4 .f16: 4 quad-pairs)
    alayout: str = "row"
    blayout: str = "col"
    bop: str = ""  # b1: "and" | "xor" (D = C + popc(A op B))
    sp_meta: int | None = None  # mma.sp: the metadata word (the same in every thread)

    @property
    def sparse(self) -> bool:
        return self.sp_meta is not None

    @property
    def na(self) -> int:
        return self.groups * self.m * self.k // (64 if self.sparse else 32)

    @property
    def nb(self) -> int:
        return self.groups * self.k * self.n // 32

    @property
    def nc(self) -> int:
        return self.groups * self.m * self.n // 32

    @property
    def dims(self) -> dict[str, tuple[int, int]]:
        """(rows, cols) of the (block-diagonal when groups > 1) logical A, B and C/D."""
        g = self.groups
        return {"a": (g * self.m, g * self.k), "b": (g * self.k, g * self.n), "c": (g * self.m, g * self.n)}


def _mma_fragments(m: int, n: int, k: int, atype: str, btype: str) -> dict[str, np.ndarray]:
    """The PTX ISA layouts of the m16n8k* and m8n8k* (not m8n8k4 .f16) shapes."""
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4
    ea, eb = element(atype).per_reg, element(btype).per_reg
    a = np.zeros((32, m * k // 32, 2), dtype=int)
    for i in range(a.shape[1]):
        r, p = divmod(i, ea)
        if m == 16:
            a[:, i, 0] = g + 8 * (r % 2)
            a[:, i, 1] = t * ea + p + (r // 2) * 4 * ea
        else:
            a[:, i, 0] = g
            a[:, i, 1] = t * ea + p + r * 4 * ea
    b = np.zeros((32, k * n // 32, 2), dtype=int)
    for i in range(b.shape[1]):
        r, p = divmod(i, eb)
        b[:, i, 0] = t * eb + p + r * 4 * eb
        b[:, i, 1] = g
    c = np.zeros((32, m * n // 32, 2), dtype=int)
    for i in range(c.shape[1]):
        c[:, i, 0] = g + 8 * (i // 2)
        c[:, i, 1] = t * 2 + i % 2
    return {"a": a, "b": b, "c": c}


def _quadpair_fragments(s: Shape) -> dict[str, np.ndarray]:
    """m8n8k4 .f16: MMA computation q runs on lanes 4q..4q+3 and 16+4q..16+4q+3; its
    matrices are block q of the block-diagonal A, B, C/D (``Shape.dims``)."""
    lanes = np.arange(32)
    q, hi, t = (lanes % 16) // 4, lanes // 16, lanes % 4
    blocks = {"a": (s.m, s.k), "b": (s.k, s.n), "c": (s.m, s.n)}
    keys = {"a": ("a", s.alayout), "b": ("b", s.blayout), "c": ("c", "f16" if s.ctype == "f16" else "f32")}
    out = {}
    for op, count in (("a", s.na), ("b", s.nb), ("c", s.nc)):
        f = QUADPAIR[keys[op]]
        lay = np.zeros((32, count, 2), dtype=int)
        for i in range(count):
            r, c = f(i, t, hi)
            lay[:, i, 0] = r + q * blocks[op][0]
            lay[:, i, 1] = c + q * blocks[op][1]
        out[op] = lay
    return out


def sparse_k(s: Shape, col: np.ndarray) -> np.ndarray:
    """Logical k of compressed A column ``col`` under the metadata ``s.sp_meta`` (one nibble
    repeated over the word, so every row and chunk keeps the same positions)."""
    meta = int(s.sp_meta or 0)
    nib = meta & 0xF
    if meta != nib * 0x11111111:
        raise ValueError(f"metadata {meta:#x}: only one nibble repeated over the word is modelled")
    lo, hi = nib & 3, nib >> 2
    e = element(s.atype)
    if e.sp_unit_bits is None:
        raise KeyError(s.atype)
    b, u = e.bits, e.sp_unit_bits
    if lo >= hi or (b > u and (lo % 2 or hi != lo + 1)):
        raise ValueError(f"metadata nibble {nib:#06b}: not an increasing index pair valid for {s.atype}")
    unit, off = np.divmod(np.asarray(col) * b, u)
    logical_unit = 4 * (unit // 2) + np.where(unit % 2 == 0, lo, hi)
    return (logical_unit * u + off) // b


def reference_layout(s: Shape) -> dict[str, np.ndarray]:
    """(row, col) of every (lane, element) of A (row=i, col=k; logical k for mma.sp),
    B (row=k, col=j) and C/D (row=i, col=j)."""
    if s.groups > 1:
        return _quadpair_fragments(s)
    lay = _mma_fragments(s.m, s.n, s.k, s.atype, s.btype)
    if s.sparse:  # compressed A = the dense A layout of the M x K/2 shape, through the metadata
        a = _mma_fragments(s.m, s.n, s.k // 2, s.atype, s.btype)["a"]
        a[..., 1] = sparse_k(s, a[..., 1])
        lay["a"] = a
    return lay


def valid_layout(s: Shape, lay: dict[str, np.ndarray]) -> bool:
    """Every slot names its own element of the (logical) matrix: no element twice, all in
    range; a dense single-product layout thereby covers its matrices completely."""
    for op, (rows, cols) in s.dims.items():
        r, c = lay[op][..., 0].ravel(), lay[op][..., 1].ravel()
        if r.min() < 0 or c.min() < 0 or r.max() >= rows or c.max() >= cols:
            return False
        if len(np.unique(r * cols + c)) != r.size:
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


def code_digits(base: int, nslots: int) -> int:
    """Base-``base`` digits that number ``nslots`` slots (at least one)."""
    digits = 1
    while base ** digits < nslots:
        digits += 1
    return digits


def design(s: Shape) -> Design:
    base = element(s.btype).max_code + 1
    nslots = 32 * s.nb
    digits = code_digits(base, nslots)
    patterns = [("ones", None)] + [("code", d) for d in range(digits)]
    probes = []
    for kind, digit in patterns:
        for lane in range(32):
            for e in range(s.na):
                probes.append({"kind": kind, "a_slot": (lane, e), "digit": digit})
    if s.bop == "xor":  # D(A = 0) of every B pattern: popc(A xor B) counts B's ones too
        probes += [{"kind": "base", "a_slot": None, "digit": digit} for _, digit in patterns]
    probes.append({"kind": "c", "a_slot": None, "digit": None})
    P = len(probes)
    # compact element types: b1 designs reach ~50k probes x 128 A elements per thread
    a = np.zeros((P, 32, s.na), dtype=np.uint8)
    b = np.zeros((P, 32, s.nb), dtype=np.uint16 if base <= 1 << 16 else np.int64)
    c = np.zeros((P, 32, s.nc))
    slot_index = np.arange(32 * s.nb).reshape(32, s.nb)
    for p, pr in enumerate(probes):
        if pr["kind"] == "c":
            c[p] = np.arange(32 * s.nc).reshape(32, s.nc) % (element(s.ctype).max_code or 1 << 20) + 1
            continue
        if pr["a_slot"] is not None:
            lane, e = pr["a_slot"]
            a[p, lane, e] = 1
        b[p] = 1 if pr["digit"] is None else (slot_index // base ** pr["digit"]) % base
    return Design(a, b, c, probes, base, digits)


def simulate(s: Shape, lay: dict[str, np.ndarray], d: Design, chunk: int = 1024) -> np.ndarray:
    """What an mma with layout ``lay`` returns for the design: D elements (P, 32, nc)
    (b1 .xor.popc: C + popc(A xor B) of 0/1 matrices)."""
    P = d.a.shape[0]
    out = np.zeros((P, 32, s.nc))
    la, lb, lc = lay["a"], lay["b"], lay["c"]
    dims = s.dims
    for p0 in range(0, P, chunk):
        sl = slice(p0, min(P, p0 + chunk))
        q = sl.stop - sl.start
        A = np.zeros((q, *dims["a"]))
        B = np.zeros((q, *dims["b"]))
        C = np.zeros((q, *dims["c"]))
        A[:, la[..., 0], la[..., 1]] = d.a[sl]
        B[:, lb[..., 0], lb[..., 1]] = d.b[sl]
        C[:, lc[..., 0], lc[..., 1]] = d.c[sl]
        AB = A @ B
        if s.bop == "xor":
            AB = A.sum(axis=2)[:, :, None] + B.sum(axis=1)[:, None, :] - 2 * AB
        out[sl] = (AB + C)[:, lc[..., 0], lc[..., 1]]
    return out


def products(s: Shape, d: Design, out: np.ndarray) -> np.ndarray:
    """The measured D as sums of products A*B. Identity except for b1 .xor.popc: with one-hot
    A, y = D(same B, A = 0) - D = 2*A.B - 1 in the row of the A element and 0 in the other
    rows, so A.B = (y + [y != 0]) / 2 there (anything else decodes to a non-code)."""
    if s.bop != "xor":
        return out
    base = {pr["digit"]: p for p, pr in enumerate(d.passes) if pr["kind"] == "base"}
    res = out.copy()
    for p, pr in enumerate(d.passes):
        if pr["kind"] in ("ones", "code"):
            y = out[base[pr["digit"]]] - out[p]
            res[p] = (y + (y != 0)) / 2
    return res


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
    out = products(s, d, out)
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
    # each A slot makes one product per column of D (n); the B elements that take part are
    # those at a k that some A slot has (mma.sp: the selected half of B's rows)
    want = 32 * s.na * s.n
    want_b = int(np.isin(lb[..., 0], np.unique(la[..., 1])).sum())
    coverage = len(triples) == want and len(seen_b) == want_b
    if not coverage:
        diffs.append(f"coverage: {len(triples)} products seen of {want}, "
                     f"{len(seen_b)} B elements of {want_b}")
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
    if element(t).minifloat:
        return _minifloat(t, v)
    mask = (1 << element(t).bits) - 1
    return (v.astype(np.int64) & mask).astype(np.uint64)


def _minifloat(t: str, v: np.ndarray) -> np.ndarray:
    """Bit patterns of exactly representable normal (or zero) values of an 8-bit float."""
    ebits, mbits, bias = element(t).minifloat
    mag = np.abs(v)
    frac, exp = np.frexp(mag)  # mag = frac * 2**exp, frac in [0.5, 1)
    e = np.where(mag > 0, exp - 1 + bias, 0)
    mant = np.where(mag > 0, (2 * frac - 1) * (1 << mbits), 0)
    if np.any(mant != np.round(mant)) or np.any((mag > 0) & ((e < 1) | (e >= (1 << ebits)))):
        raise ValueError(f"values not exactly representable as normal {t}")
    sign = (v < 0).astype(np.uint64) << np.uint64(ebits + mbits)
    return sign | (e.astype(np.uint64) << np.uint64(mbits)) | mant.astype(np.uint64)


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
    e = element(t).per_reg
    b = bits.reshape(*vals.shape[:-1], -1, e)
    shifts = (np.arange(e, dtype=np.uint64) * element(t).bits).astype(np.uint64)
    return (b << shifts).sum(axis=-1).astype(np.uint32)

