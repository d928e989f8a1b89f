"""Any JSON value as HTML (the raw dumps of the report and the fleet page): dicts as key/value
tables, lists of dicts as tables, numbers read by their key."""

from __future__ import annotations

from markupsafe import Markup, escape

from gpudissect.report.present.fmt import fmt_keyed

MAX_LIST = 200


def render_value(v, depth: int = 0, key: str = "") -> Markup:
    """Any JSON value as HTML: dicts as key/value tables, lists of dicts as tables; numbers
    read by their key (:func:`fmt_keyed`: Unix times as dates, byte counts in KiB/MiB/GiB)."""
    if isinstance(v, dict):
        if not v:
            return Markup("<i>{}</i>")
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{render_value(x, depth + 1, k)}</td></tr>"
                       for k, x in v.items())
        return Markup(f'<table class="kv">{rows}</table>')
    if isinstance(v, list):
        if v and all(isinstance(x, dict) for x in v):
            cols: list[str] = []
            for x in v[:MAX_LIST]:
                for k in x:
                    if k not in cols:
                        cols.append(k)
            head = "".join(f"<th>{escape(c)}</th>" for c in cols)
            body = "".join("<tr>" + "".join(f"<td>{render_value(x.get(c), depth + 1, c)}</td>" for c in cols)
                           + "</tr>" for x in v[:MAX_LIST])
            more = f"<p class=note>{len(v) - MAX_LIST} more rows in the JSON</p>" if len(v) > MAX_LIST else ""
            return Markup(f'<table class="grid"><tr>{head}</tr>{body}</table>{more}')
        items = ", ".join(str(render_value(x, depth + 1, key)) for x in v[:MAX_LIST])
        more = f", ... ({len(v)} items)" if len(v) > MAX_LIST else ""
        return Markup(f"[{items}{escape(more)}]")
    return escape(fmt_keyed(key, v))
