"""The predictor's corpus of public kernels (``corpus/README.md``): specs, expressions, launches
and buffers. No GPU needed; :mod:`corpus_measure` runs them.

A kernel's launch description is data (``corpus/<project>/kernels.toml``): its arguments are
expressions of ``T`` (trips of the measured loop per thread, in source iterations) and of the
launch (``threads``, ``blocks``, ``block``, ``sms``, ``warps``). The split a kernel belongs to
(``train`` or ``held-out``) comes from a hash of its name, so nobody chooses which kernels score
the model.
"""

from __future__ import annotations

import ast
import hashlib
import math
import operator
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpudissect.predict import PredictError

CATEGORIES = ("compute", "l1_shared", "l2", "dram", "tensor")
POINTS = ("1", "4", "8", "16", "full")
HELD_OUT_EVERY = 3  # one kernel in three (by its name's hash) is held out
TYPES = {"f32": "f4", "f64": "f8", "i32": "i4", "u32": "u4", "i64": "i8", "u64": "u8", "f16": "f2",
         "i8": "i1", "u8": "u1"}
INITS = ("zeros", "ones", "uniform", "iota", "randint", "step", "const")
SUFFIX = {"K": 1 << 10, "M": 1 << 20}


def default_root() -> Path:
    """The corpus of a source checkout (``corpus/`` beside ``src/``)."""
    return Path(__file__).resolve().parents[3] / "corpus"


# ------------------------------------------------------------------ expressions
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_FUNCS = {"min": min, "max": max}


def evaluate(expr: str | int | float, env: dict[str, float]) -> float:
    """An arithmetic expression of the README's form over ``env``'s names (``4K``, ``2M``
    suffixes; ``min``/``max``); a ``ValueError`` naming what is wrong."""
    if isinstance(expr, (int, float)):
        return expr
    text = str(expr)
    for s, v in SUFFIX.items():  # 4K -> (4*1024)
        text = _suffix(text, s, v)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"expression '{expr}': not arithmetic") from None

    def ev(n: ast.AST) -> float:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in env:
                raise ValueError(f"expression '{expr}': unknown name '{n.id}' (known: {', '.join(sorted(env))})")
            return env[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            return _BIN[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _FUNCS and n.args:
            return _FUNCS[n.func.id](*(ev(a) for a in n.args))
        raise ValueError(f"expression '{expr}': '{ast.unparse(n)}' is not allowed")

    return ev(tree)


def _suffix(text: str, s: str, v: int) -> str:
    import re

    return re.sub(rf"\b(\d+){s}\b", rf"(\1*{v})", text)


def count_of(expr, env: dict[str, float]) -> int:
    v = evaluate(expr, env)
    if v < 0 or v != math.floor(v):
        raise ValueError(f"'{expr}' = {v}: not a whole non-negative number")
    return int(v)


# ------------------------------------------------------------------ specs
@dataclass(frozen=True)
class Case:
    category: str
    trips: tuple[int, ...]
    warps: tuple[str, ...]  # points (of POINTS) measured


@dataclass(frozen=True)
class CorpusKernel:
    name: str
    project: str  # folder name
    folder: Path
    file: str
    symbol: str
    repo: str
    commit: str
    licence: str
    path: str
    what: str
    block: tuple[int, int, int] | None  # None: "any" (the harness picks)
    smem: str
    unroll: int
    loop: int
    args: tuple[dict, ...]
    cases: tuple[Case, ...]
    # the source loop's counter step, in the unit of the SASS loop's counter, where the source
    # shows it: the loop's counter step per trip is then ``unroll`` x ``stride`` (a test checks
    # it on the stored SASS of the measured loop)
    stride: int | None = None
    # the instructions a forward branch in the loop skips run once every so many trips, as the
    # source says (a hash's block transform every 64th byte): predict's --rare-every hint
    rare_every: int | None = None

    @property
    def source(self) -> str:
        return f"{self.repo}@{self.commit}:{self.path}"

    @property
    def split(self) -> str:
        return split_of(self.name)

    def cubin_path(self, arch: str) -> Path:
        return self.folder / f"{self.name}.{arch}.cubin"


def split_of(name: str) -> str:
    """``held-out`` for one name in ``HELD_OUT_EVERY`` (a stable hash), else ``train``."""
    return "held-out" if int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % HELD_OUT_EVERY == 0 else "train"


def _block(v, where: str) -> tuple[int, int, int] | None:
    if v == "any":
        return None
    dims = [v] if isinstance(v, int) else list(v)
    if not dims or len(dims) > 3 or not all(isinstance(d, int) and d > 0 for d in dims):
        raise PredictError(f"{where}: block must be a number, [x, y(, z)] or \"any\" (got {v!r})")
    dims += [1] * (3 - len(dims))
    if math.prod(dims) % 32:
        raise PredictError(f"{where}: block {v!r} is not a whole number of warps")
    return (dims[0], dims[1], dims[2])


def _check_arg(a: dict, where: str) -> None:
    if "buf" in a:
        if a.get("type") not in TYPES:
            raise PredictError(f"{where}: buffer '{a['buf']}' type {a.get('type')!r} (one of {', '.join(TYPES)})")
        kind = str(a.get("init", "zeros")).split(":")[0]
        if kind not in INITS:
            raise PredictError(f"{where}: buffer '{a['buf']}' init {a.get('init')!r} (one of {', '.join(INITS)})")
        if "count" not in a:
            raise PredictError(f"{where}: buffer '{a['buf']}' has no count")
    elif "scalar" in a:
        if a["scalar"] not in TYPES or "value" not in a:
            raise PredictError(f"{where}: scalar {a!r} needs a type of {', '.join(TYPES)} and a value")
    else:
        raise PredictError(f"{where}: argument {a!r} is neither a buf nor a scalar")


def _case(c: dict, where: str) -> Case:
    if c.get("category") not in CATEGORIES:
        raise PredictError(f"{where}: case category {c.get('category')!r} (one of {', '.join(CATEGORIES)})")
    trips = tuple(int(t) for t in c.get("trips", ()))
    if len(trips) < 3 or len(set(trips)) < 3 or min(trips) < 1:
        raise PredictError(f"{where}: a case needs at least three different positive trip counts")
    warps = tuple(str(w) for w in c.get("warps", POINTS))
    if set(warps) - set(POINTS):
        raise PredictError(f"{where}: warps {sorted(set(warps) - set(POINTS))} (of {', '.join(POINTS)})")
    return Case(c["category"], trips, warps)


def load_project(folder: Path) -> list[CorpusKernel]:
    f = folder / "kernels.toml"
    try:
        doc = tomllib.loads(f.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PredictError(f"{f}: {e}") from None
    proj = doc.get("project", {})
    for key in ("repo", "commit", "licence"):
        if not proj.get(key):
            raise PredictError(f"{f}: [project] has no {key}")
    out = []
    for k in doc.get("kernel", []):
        where = f"{f} kernel {k.get('name', '?')}"
        for key in ("name", "file", "symbol", "path", "args", "cases"):
            if key not in k:
                raise PredictError(f"{where}: no {key}")
        for a in k["args"]:
            _check_arg(a, where)
        out.append(CorpusKernel(
            name=k["name"], project=folder.name, folder=folder, file=k["file"], symbol=k["symbol"],
            repo=k.get("repo", proj["repo"]), commit=k.get("commit", proj["commit"]),
            licence=k.get("licence", proj["licence"]), path=k["path"], what=k.get("what", ""),
            block=_block(k.get("block", "any"), where), smem=str(k.get("smem", "0")),
            unroll=int(k.get("unroll", 1)), loop=int(k.get("loop", 0)), args=tuple(k["args"]),
            cases=tuple(_case(c, where) for c in k["cases"]),
            stride=int(k["stride"]) if "stride" in k else None,
            rare_every=int(k["rare_every"]) if "rare_every" in k else None))
    return out


def load_corpus(root: Path | None = None, only: tuple[str, ...] = ()) -> list[CorpusKernel]:
    """Every kernel of the corpus (``only``: those whose name or project is listed)."""
    root = root or default_root()
    if not root.is_dir():
        raise PredictError(f"no corpus at {root}")
    ks = [k for d in sorted(p for p in root.iterdir() if (p / "kernels.toml").is_file())
          for k in load_project(d)]
    seen: dict[str, str] = {}
    for k in ks:
        if k.name in seen:
            raise PredictError(f"corpus kernel '{k.name}' is named twice ({seen[k.name]}, {k.project})")
        seen[k.name] = k.project
    if only:
        ks = [k for k in ks if k.name in only or k.project in only]
    return ks


# ------------------------------------------------------------------ launches
@dataclass(frozen=True)
class Launch:
    point: str
    warps: int  # per SM
    block: tuple[int, int, int]
    blocks_per_sm: int

    @property
    def block_threads(self) -> int:
        return math.prod(self.block)


def launches(k: CorpusKernel, case: Case, regs: int, smem: int, rules: dict) -> list[Launch]:
    """The occupancy points of ``case`` this kernel can run: a fixed block gives multiples of
    its warps (a point it cannot reach is left out); "full" is the most blocks the occupancy
    rules allow (``smem``: static + dynamic shared memory per block)."""
    from gpudissect.arch.occupancy import predict_blocks

    out = []
    for p in case.warps:
        if k.block is None:  # one block of w warps per SM, or the fullest of the usual sizes
            if p == "full":
                best = None
                for bw in (32, 16, 8, 4):
                    nb = min(predict_blocks(bw * 32, regs, smem, rules)["blocks"], rules["max_warps_per_sm"] // bw)
                    if nb >= 1 and (best is None or bw * nb > best.warps):
                        best = Launch(p, bw * nb, (bw * 32, 1, 1), nb)
                if best is not None:
                    out.append(best)
            else:
                out.append(Launch(p, int(p), (32 * int(p), 1, 1), 1))
            continue
        bw = math.prod(k.block) // 32
        most = predict_blocks(bw * 32, regs, smem, rules)["blocks"]
        nb = most if p == "full" else int(p) // bw if int(p) % bw == 0 else 0
        if 1 <= nb <= most:
            out.append(Launch(p, nb * bw, k.block, nb))
    return out


def env_of(ln: Launch, sms: int, trips: int) -> dict[str, float]:
    blocks = ln.blocks_per_sm * sms
    return {"T": trips, "threads": blocks * ln.block_threads, "blocks": blocks, "block": ln.block_threads,
            "sms": sms, "warps": ln.warps}


class Pool:
    """Random values drawn once and sliced (drawing gigabytes per launch would cost minutes)."""

    def __init__(self, seed: int = 32):
        self.rng = np.random.default_rng(seed)
        self.floats = np.zeros(0, "f4")
        self.ints = np.zeros(0, "u4")

    def take(self, n: int, floats: bool) -> np.ndarray:
        have = self.floats if floats else self.ints
        if len(have) < n:
            have = self.rng.random(n, dtype="f4") if floats else self.rng.integers(0, 1 << 31, n, dtype="u4")
            if floats:
                self.floats = have
            else:
                self.ints = have
        return have[:n]


def array_of(a: dict, env: dict[str, float], pool: Pool) -> np.ndarray:
    """A buffer argument's host data."""
    n = count_of(a["count"], env)
    dt = np.dtype(TYPES[a["type"]])
    kind, _, arg = str(a.get("init", "zeros")).partition(":")
    flt = dt.kind == "f"
    if kind == "zeros":
        return np.zeros(n, dt)
    if kind == "ones":
        return np.ones(n, dt)
    if kind == "const":
        return np.full(n, float(arg) if flt else int(evaluate(arg, env)), dt)
    if kind == "iota":
        return np.arange(n, dtype=dt)
    if kind == "step":
        return (np.arange(n, dtype=np.int64) * count_of(arg, env)).astype(dt)
    if kind == "randint":
        hi = count_of(arg, env)
        if hi < 1:
            raise ValueError(f"buffer '{a['buf']}': randint:{arg} = {hi} (needs at least 1)")
        return (pool.take(n, False) % hi).astype(dt)
    # uniform: floats in [0, 1), integers in [0, 100)
    return pool.take(n, True).astype(dt) if flt else (pool.take(n, False) % 100).astype(dt)


def scalar_of(a: dict, env: dict[str, float]) -> np.generic:
    dt = np.dtype(TYPES[a["scalar"]])
    v = evaluate(a["value"], env)
    return dt.type(v if dt.kind == "f" else int(v))


def footprint(k: CorpusKernel, env: dict[str, float]) -> int:
    """Bytes of every buffer argument (the data the kernel can touch)."""
    return sum(count_of(a["count"], env) * np.dtype(TYPES[a["type"]]).itemsize for a in k.args if "buf" in a)
