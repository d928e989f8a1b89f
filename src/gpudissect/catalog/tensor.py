"""The tensor-core catalog: mma.sync / wmma.mma / mma.sp, wgmma and ldmatrix / stmatrix /
wmma.load / wmma.store variants as data (``tensor.toml`` beside this module), and the one
table of operand element types the tensor suite works from.

Element types: ``tensor.toml [types]`` gives each type's width; :data:`ELEMENT_FACTS` adds
what the generators and experiments need beyond it (the "one" operand word, exact integer
codes, 8-bit float formats, sparse metadata units, the smallest subnormal, the PTX register
class). Fragment registers are 32 bits wide except for f64 (one element per 64-bit register),
so elements per register and words per register follow from the width.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from gpudissect.catalog.model import CATALOG_DIR

TENSOR_TOML = CATALOG_DIR / "tensor.toml"


@dataclass(frozen=True)
class ElementType:
    name: str
    bits: int  # tensor.toml [types]
    # a fragment register of "one" values (timing operands; f64: the 64-bit register; b1:
    # alternating bits); None: the type has no timing operands
    one_word: int | None = None
    max_code: int | None = None  # the largest n such that 0..n are exact (layout codes)
    minifloat: tuple[int, int, int] | None = None  # 8-bit floats: (exponent bits, mantissa bits, bias)
    sp_unit_bits: int | None = None  # mma.sp: bits of the unit a metadata index selects
    subnormal: float | None = None  # the smallest positive subnormal (numerics experiment)
    reg_class: str = ".b32"  # PTX register class of a fragment register

    @property
    def reg_bits(self) -> int:
        """Bits of one fragment register: 32, or 64 for a 64-bit element."""
        return max(32, self.bits)

    @property
    def per_reg(self) -> int:
        """Elements per fragment register."""
        return self.reg_bits // self.bits

    @property
    def reg_words(self) -> int:
        """32-bit words per fragment register."""
        return self.reg_bits // 32

    @property
    def reg_bytes(self) -> int:
        return self.reg_bits // 8


# what the tensor suite knows of each element type beside its width (see ElementType)
ELEMENT_FACTS: dict[str, dict] = {
    "f16": {"one_word": 0x3C003C00, "max_code": 2048, "sp_unit_bits": 16, "subnormal": 2.0 ** -24},
    "bf16": {"one_word": 0x3F803F80, "max_code": 256, "sp_unit_bits": 16, "subnormal": 2.0 ** -133},
    "tf32": {"one_word": 0x3F800000, "max_code": 2048, "sp_unit_bits": 16, "subnormal": 2.0 ** -136},
    "f32": {"one_word": 0x3F800000, "reg_class": ".f32"},
    "f64": {"one_word": 0x3FF0000000000000, "max_code": 1 << 20, "reg_class": ".f64"},
    "e4m3": {"one_word": 0x38383838, "max_code": 16, "minifloat": (4, 3, 7), "sp_unit_bits": 8},
    "e5m2": {"one_word": 0x3C3C3C3C, "max_code": 8, "minifloat": (5, 2, 15), "sp_unit_bits": 8},
    "s8": {"one_word": 0x01010101, "max_code": 127, "sp_unit_bits": 8},
    "u8": {"one_word": 0x01010101, "max_code": 255, "sp_unit_bits": 8},
    "s4": {"one_word": 0x11111111, "max_code": 7, "sp_unit_bits": 8},
    "u4": {"one_word": 0x11111111, "max_code": 15, "sp_unit_bits": 8},
    "b1": {"one_word": 0x55555555, "max_code": 1},
    "s32": {"one_word": 1},
}


@dataclass(frozen=True)
class MmaVariant:
    name: str
    ptx: str
    shape: tuple[int, int, int]
    atype: str
    btype: str
    ctype: str
    dtype: str
    min_arch: int
    regs: dict
    flops: int
    groups: int = 1
    # "mma" (mma.sync), "wmma" (wmma.mma) or "mma.sp" (sparse A: the PTX takes two more
    # operands, a metadata register holding ``sp_meta`` and the selector ``sp_sel``)
    form: str = "mma"
    sp_meta: int | None = None
    sp_sel: int = 0

    @property
    def kind(self) -> str:
        return "mma"

    @property
    def sparse(self) -> bool:
        return self.sp_meta is not None

    @property
    def peak_key(self) -> str:
        """The key of the datasheet peak this variant is compared with (tensor_peaks.toml of the architecture's folder):
        the sparse figure for mma.sp (its FLOPs are of the logical shape)."""
        return f"{self.atype}:sparse" if self.sparse else self.atype


@dataclass(frozen=True)
class WgmmaVariant:
    name: str
    atype: str
    btype: str
    dtype: str
    k: int
    n_step: int
    a_from_registers: bool
    transpose_args: bool
    scale_args: bool
    min_arch: str
    extra: str = ""
    # wgmma.mma_async.sp (sparse A): the metadata word and the sparsity selector; ``k`` is then
    # the logical (dense-equivalent) K
    sp_meta: int | None = None
    sp_sel: int = 0

    @property
    def kind(self) -> str:
        return "wgmma"

    @property
    def sparse(self) -> bool:
        return self.sp_meta is not None

    @property
    def peak_key(self) -> str:
        """The key of the datasheet peak this variant is compared with (tensor_peaks.toml of the architecture's folder)."""
        return f"{self.atype}:sparse" if self.sparse else self.atype

    def d_regs(self, n: int) -> int:
        elems = 64 * n // 128
        return elems // 2 if self.dtype == "f16" else elems

    def flops(self, n: int) -> int:
        return 2 * 64 * n * self.k

    def k_bytes(self, operand: str) -> int:
        """Bytes along K of one row of A (``"a"``: K/2 when sparse) or one column of B."""
        k = self.k // 2 if (operand == "a" and self.sparse) else self.k
        return k * load_tensor_catalog().types[self.atype if operand == "a" else self.btype].bits // 8

    def instr(self, n: int, a_regs: bool) -> str:
        tag = f".{self.extra}" if self.extra else ""
        sp = ".sp" if self.sparse else ""
        return f"wgmma.mma_async{sp}.sync.aligned.m64n{n}k{self.k}.{self.dtype}.{self.atype}.{self.btype}{tag}"


@dataclass(frozen=True)
class LdstVariant:
    name: str
    op: str  # ldmatrix | stmatrix | wmma.load | wmma.store
    ptx: str
    shape: str
    matrices: int
    trans: bool
    regs: int
    bytes: int
    min_arch: str
    # wmma.load / wmma.store only (derived from the wmma.mma entries, see wmma_ldst_variants):
    frag: str = ""  # a | b | c | d
    layout: str = ""  # row | col (memory layout of the matrix)
    elem: str = ""  # element type
    rows: int = 0
    cols: int = 0
    ldm: int = 0  # leading dimension in elements (no padding)
    cls: str = ".b32"  # PTX register class of the fragment registers

    @property
    def kind(self) -> str:
        return "ldst"

    @property
    def wmma(self) -> bool:
        return self.op.startswith("wmma.")

    @property
    def atype(self) -> str:
        """Key of the datasheet-peak table: data movement has none."""
        return "b16" if self.shape == "m8n8" else "b8"


def _wmma_layouts(ptx: str) -> tuple[str, str]:
    m = re.search(r"\.(row|col)\.(row|col)\.", ptx)
    if not m:
        raise ValueError(f"no A/B layouts in {ptx!r}")
    return m.group(1), m.group(2)


def wmma_ldst_variants(mma: list[MmaVariant], types: dict[str, ElementType]) -> list[LdstVariant]:
    """The wmma.load.{a,b,c} / wmma.store.d variants implied by the wmma.mma entries of the
    catalog: each (fragment, shape, memory layout, type) once, with the fragment's register
    count from the entry (A/B in the entry's layouts, C/D in both), in shared memory."""
    out: dict[str, LdstVariant] = {}
    for v in mma:
        if v.form != "wmma":
            continue
        m, n, k = v.shape
        la, lb = _wmma_layouts(v.ptx)
        shape = f"m{m}n{n}k{k}"
        cands = [("a", v.atype, la, v.regs["a"], m, k), ("b", v.btype, lb, v.regs["b"], k, n)]
        for lay in ("row", "col"):
            cands += [("c", v.ctype, lay, v.regs["c"], m, n), ("d", v.dtype, lay, v.regs["d"], m, n)]
        for frag, typ, lay, regs, rows, cols in cands:
            op = "wmma.store" if frag == "d" else "wmma.load"
            name = f"{op}.{frag}.{shape}.{lay}.{typ}"
            if name in out:
                continue
            out[name] = LdstVariant(
                name=name, op=op, ptx=f"{op}.{frag}.sync.aligned.{lay}.{shape}.shared.{typ}", shape=shape,
                matrices=1, trans=False, regs=regs, bytes=rows * cols * types[typ].bits // 8,
                min_arch=f"sm_{v.min_arch}", frag=frag, layout=lay, elem=typ, rows=rows, cols=cols,
                ldm=cols if lay == "row" else rows, cls=types[typ].reg_class)
    return list(out.values())


@dataclass
class TensorCatalog:
    types: dict[str, ElementType]
    mma: list[MmaVariant] = field(default_factory=list)
    wgmma: list[WgmmaVariant] = field(default_factory=list)
    ldst: list[LdstVariant] = field(default_factory=list)


@cache
def load_tensor_catalog(path: str | None = None) -> TensorCatalog:
    raw = tomllib.loads((TENSOR_TOML if path is None else Path(path)).read_text())
    types = {k: ElementType(k, int(v["bits"]), **ELEMENT_FACTS.get(k, {})) for k, v in raw["types"].items()}
    mma = [MmaVariant(**{**d, "shape": tuple(d["shape"])}) for d in raw.get("mma", [])]
    wg = [WgmmaVariant(**d) for d in raw.get("wgmma", [])]
    ld = [LdstVariant(**d) for d in raw.get("ldst", [])]
    ld += wmma_ldst_variants(mma, types)
    return TensorCatalog(types, mma, wg, ld)


def element(t: str) -> ElementType:
    """An operand element type of the tensor catalog (KeyError for one it does not hold)."""
    return load_tensor_catalog().types[t]
