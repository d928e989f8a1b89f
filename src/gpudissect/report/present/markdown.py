"""The markdown kit of the timing reference: tables, structured summary values, a suite's
conclusions, quantity rows; and the section contract by which each suite (and the core's
own analyses) contributes to the timing reference.

A suite's ``view`` module lists its sections as ``TIMING_SECTIONS`` (:class:`TimingSection`:
where it stands, and the function that writes it); the assembler
(``report/assemble/timing_reference.py``) sets every section of every registered suite in
order. A suite that lists none gets a generic section (its description, its own
``markdown_section(summary)`` if it has one, its conclusions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpudissect.report.present.fmt import fmt_num
from gpudissect.report.read.metrics import lookup
from gpudissect.report.read.results import ResultSet

NOT_MEASURED = "_not measured_"


@dataclass
class TimingContext:
    """What every section of one timing reference sees: the result set, the schedulers per
    SM (measured, else 4), and a memo for what several sections of a suite share."""

    rs: ResultSet
    nsched: int
    memo: dict = field(default_factory=dict)

    def once(self, key: str, make: Callable[[], object]):
        """``make()`` the first time ``key`` is asked for, its value after."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


@dataclass(frozen=True)
class TimingSection:
    """One section of the timing reference: ``order`` places it among all of them (lower
    first), ``lines(ctx)`` writes it."""

    order: int
    lines: Callable[[TimingContext], list[str]]


def cell(v) -> str:
    if isinstance(v, (dict, list)):
        s = ", ".join(f"{k}={cell(x)}" for k, x in v.items()) if isinstance(v, dict) else \
            ", ".join(cell(x) for x in v)
        return s if len(s) < 120 else s[:117] + "..."
    return fmt_num(v).replace("|", "\\|")


def md_table(rows: list[dict], cols: list[str] | None = None) -> list[str]:
    if not rows:
        return []
    if cols is None:
        cols = []
        for r in rows:
            cols += [k for k in r if k not in cols]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return out + [""]


def summary_of(rs: ResultSet, suite: str) -> dict:
    """The stored summary of ``suite`` in the result set ({} when it has none)."""
    return (rs.docs.get(suite) or {}).get("summary") or {}


def find_key(d: dict, *names: str):
    low = {str(k).lower(): v for k, v in d.items()}
    for n in names:
        if n in low:
            return low[n]
    return None


def structured(value, title: str) -> list[str]:
    """A summary value as markdown: a list of records as a table, a table per key of nested
    tables, a dict as key/value rows, anything else as one line."""
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return md_table(value)
    if isinstance(value, dict) and value:
        if all(isinstance(x, dict) for x in value.values()) and all(
                any(isinstance(y, list) and y and all(isinstance(z, dict) for z in y) for y in x.values())
                for x in value.values()):
            out: list[str] = []
            for k, x in value.items():  # e.g. one table per access width, with its fit
                out += [f"#### {title} {k}", ""]
                for kk, y in x.items():
                    if isinstance(y, list) and y and all(isinstance(z, dict) for z in y):
                        out += md_table(y)
                    else:
                        out += [f"{kk}: {cell(y)}", ""]
            return out
        if all(isinstance(x, dict) for x in value.values()):
            return md_table([{title: k, **x} for k, x in value.items()])
        return md_table([{"key": k, "value": x} for k, x in value.items()])
    if value is not None:
        return [cell(value), ""]
    return []


def conclusions(rs: ResultSet, suite: str, words: tuple[str, ...] = ()) -> list[str]:
    """The suite's stored conclusions as list items (those naming one of ``words``, if given)."""
    cs = summary_of(rs, suite).get("conclusions") or []
    if words:
        cs = [c for c in cs if any(w in c.lower() for w in words)]
    return [f"- {c}" for c in cs]


def quantity_rows(rs: ResultSet, names: list[tuple[str, str]]) -> list[str]:
    """A table of key quantities (report/read/metrics.py) with what measured each."""
    lines = ["| quantity | value | unit | measured by |", "|---|---:|---|---|"]
    for name, label in names:
        f = lookup(rs, name)
        if f is None:
            lines.append(f"| {label} | {NOT_MEASURED} | | |")
        else:
            flags = f" [flags: {', '.join(f.flags)}]" if f.flags else ""
            lines.append(f"| {label} | {fmt_num(f.value)} | {f.unit} | {f.source}{flags} |")
    return lines + [""]
