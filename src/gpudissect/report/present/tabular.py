"""Flat tables of records: CSV, JSON and Parquet (pyarrow, the ``report`` extra); and
:class:`ReportTable`, the shape in which a suite's view hands the HTML report a table.

One row per record with the stable keys of ``store.export.JSON_KEYS`` plus ``suite``; the
nested fields (params, fit, samples) are JSON text in Parquet and CSV, lists (flags, sass)
are Parquet lists and ``; ``-joined in CSV.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from gpudissect.store.export import JSON_KEYS

COLUMNS = ("suite",) + JSON_KEYS
NESTED = ("params", "fit", "samples")
LISTS = ("flags", "sass")


class ExportError(RuntimeError):
    pass


def _row(r: dict) -> dict:
    return {k: r.get(k) for k in COLUMNS}


def write_json_table(recs: list[dict], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([_row(r) for r in recs], indent=1) + "\n")
    return len(recs)


def write_csv_table(recs: list[dict], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in recs:
            row = _row(r)
            w.writerow(["; ".join(row[k] or []) if k in LISTS else
                        (json.dumps(row[k]) if k in NESTED and row[k] is not None else
                         ("" if row[k] is None else row[k])) for k in COLUMNS])
    return len(recs)


def _schema():
    import pyarrow as pa

    types = {"value": pa.float64(), "run_id": pa.int64(), "flags": pa.list_(pa.string()),
             "sass": pa.list_(pa.string())}
    return pa.schema([(k, types.get(k, pa.string())) for k in COLUMNS])


def write_parquet(recs: list[dict], path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("Parquet export needs pyarrow: pip install 'gpudissect[report]'") from None
    cols: dict[str, list] = {k: [] for k in COLUMNS}
    for r in recs:
        row = _row(r)
        for k in COLUMNS:
            v = row[k]
            if k in NESTED:
                v = None if v is None else json.dumps(v, sort_keys=True)
            elif k in LISTS:
                v = [str(x) for x in v or []]
            elif k == "value":
                v = None if v is None else float(v)
            elif k == "run_id":
                v = None if v is None else int(v)
            elif v is not None:
                v = str(v)
            cols[k].append(v)
    table = pa.Table.from_pydict(cols, schema=_schema())
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return len(recs)


def read_parquet(path: Path) -> list[dict]:
    """The records back, with the nested fields decoded (for users and the round-trip test)."""
    import pyarrow.parquet as pq

    out = []
    for row in pq.read_table(path).to_pylist():
        for k in NESTED:
            if row.get(k) is not None:
                row[k] = json.loads(row[k])
        out.append(row)
    return out


def write_table(recs: list[dict], path: Path, fmt: str) -> int:
    writers = {"json": write_json_table, "csv": write_csv_table, "parquet": write_parquet}
    if fmt not in writers:
        raise ExportError(f"unknown table format '{fmt}' ({', '.join(writers)})")
    return writers[fmt](recs, path)


@dataclass
class Cell:
    """One cell of a report table: the text shown, the value a sort uses (None: the text),
    and CSS classes (``num``, ``code``, ``flags``, ``note``, ``wrap``)."""
    text: str
    sort: float | str | None = None
    cls: str = ""


@dataclass
class ReportTable:
    """A table of the HTML report, already formatted (views build them, the template draws
    them). ``numeric`` columns are right-aligned and sort as numbers; ``code`` columns are
    monospace; ``wrap`` columns (flags, SASS, long names) break anywhere so the table fits the
    page. ``scroll`` puts a long table in a box of limited height with its header kept in
    view; ``collapsed`` puts it in a closed ``<details>``."""
    key: str
    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    note: str = ""
    numeric: tuple[int, ...] = ()
    code: tuple[int, ...] = ()
    wrap: tuple[int, ...] = ()
    scroll: bool = False
    collapsed: bool = False
    sortable: bool = True

    def add(self, *cells) -> None:
        """Append a row; each cell a :class:`Cell`, or a value shown as ``str`` (None: '-')."""
        self.rows.append([c if isinstance(c, Cell) else Cell("-" if c is None else str(c)) for c in cells])

    def col_class(self, i: int) -> str:
        return " ".join(name for name, cols in (("num", self.numeric), ("code", self.code),
                                                ("wrap", self.wrap)) if i in cols)
