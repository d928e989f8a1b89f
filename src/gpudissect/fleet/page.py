"""The fleet page of the HTML report: a GPU x measure heat map of each GPU's deviation from the
fleet median, the outlier table with each outlier's evidence, and the GPUs that failed. Read
from the ``fleet:outliers`` entry that ``gpudissect fleet`` stores beside the results."""

from __future__ import annotations

from pathlib import Path

from markupsafe import Markup, escape

OUTLIERS_META = "fleet:outliers"
MAX_MEASURES = 400  # heat map columns (the largest spreads first)


def _colour(dev: float, threshold: float) -> str:
    """White at 0, full red (slower/higher) or blue (lower) at twice the threshold."""
    x = max(-1.0, min(1.0, dev / (2 * threshold))) if threshold > 0 else 0.0
    fade = int(255 * (1 - abs(x)))
    return f"rgb(255,{fade},{fade})" if x > 0 else f"rgb({fade},{fade},255)"


def heat_map(doc: dict) -> Markup:
    gpus = [g for g in doc["gpus"] if g["status"] == "done"]
    ms = sorted(doc["measures"], key=lambda m: -(m.get("rel_spread") or 0.0))[:MAX_MEASURES]
    if not ms or not gpus:
        return Markup("<p class=note>No measure was compared across the fleet (fewer than three GPUs "
                      "measured it cleanly).</p>")
    th = doc["threshold"]
    head = "".join(f'<th class="fm" title="{escape(m["name"])}"><span>{escape(m["name"][:48])}</span></th>'
                   for m in ms)
    rows = []
    for g in gpus:
        cells = []
        for m in ms:
            d = m["deviations"].get(g["key"])
            if d is None:
                why = m["left_out"].get(g["key"], "not measured")
                cells.append(f'<td class="fc" title="{escape(g["key"])}: {escape(m["name"])}: {escape(why)}">'
                             "&middot;</td>")
                continue
            tip = (f"{g['key']}: {m['name']}: {m['values'][g['key']]:.4g} {m['unit']} "
                   f"(median {m['median']:.4g}, {d:+.2%})")
            mark = " out" if abs(d) > th else ""
            cells.append(f'<td class="fc{mark}" style="background:{_colour(d, th)}" title="{escape(tip)}">'
                         "</td>")
        rows.append(f'<tr><th class="fg">{escape(g["key"])}</th>{"".join(cells)}</tr>')
    more = (f"<p class=note>The {len(ms)} measures with the largest spread of {len(doc['measures'])}.</p>"
            if len(doc["measures"]) > len(ms) else "")
    return Markup(f'<div class="fleet-heat"><table><tr><th></th>{head}</tr>{"".join(rows)}</table></div>'
                  f"{more}")


def outlier_table(doc: dict) -> Markup:
    from gpudissect.report.present.json_html import render_value

    if not doc["outliers"]:
        return Markup(f"<p>No GPU deviates by more than {doc['threshold'] * 100:g}% from the fleet median on "
                      "any measure.</p>")
    rows = []
    for o in doc["outliers"]:
        ms = "".join(f"<li>{escape(m['measure'])}: {m['value']:.4g} {escape(m['unit'])} against "
                     f"{m['median']:.4g} (<b>{m['deviation']:+.1%}</b>)</li>" for m in o["measures"][:12])
        more = f"<li>... {len(o['measures']) - 12} more</li>" if len(o["measures"]) > 12 else ""
        rows.append(f"<tr><td>{escape(o['key'])}</td><td><code>{escape(o['uuid'] or '')}</code></td>"
                    f"<td><ul>{ms}{more}</ul></td><td>{render_value(o['evidence'])}</td></tr>")
    return Markup('<table class="grid"><tr><th>GPU</th><th>UUID</th><th>measures beyond the threshold'
                  f'</th><th>evidence</th></tr>{"".join(rows)}</table>')


def pair_table(doc: dict) -> Markup:
    """Two GPUs: the measures on which the second differs from the first beyond the threshold,
    the largest first, with both GPUs' evidence."""
    from gpudissect.report.present.json_html import render_value

    pair = doc["pair"]
    a, b, diffs = pair["a"], pair["b"], pair["differences"]
    ev = "".join(f"<tr><td>{escape(k)}</td><td>{render_value(doc['evidence'].get(k) or {})}</td></tr>"
                 for k in (a, b))
    if not diffs:
        body = Markup(f"<p>No measure differs by more than {doc['threshold'] * 100:g}% between {escape(b)} and "
                      f"{escape(a)} ({pair['compared']} compared).</p>")
    else:
        rows = "".join(f"<tr><td>{escape(d['measure'])}</td><td>{d['a']:.4g}</td><td>{d['b']:.4g}</td>"
                       f"<td>{escape(d['unit'])}</td><td><b>{d['rel_diff']:+.1%}</b></td></tr>" for d in diffs)
        body = Markup(f'<table class="grid"><tr><th>measure</th><th>{escape(a)}</th><th>{escape(b)}</th>'
                      f"<th>unit</th><th>{escape(b)} vs {escape(a)}</th></tr>{rows}</table>")
    return Markup(f"{body}<h3>Evidence</h3><table class=\"grid\"><tr><th>GPU</th><th>evidence</th></tr>{ev}"
                  "</table>")


def failed_table(doc: dict) -> Markup:
    if not doc["failed"]:
        return Markup("")
    rows = "".join(f"<tr><td>{escape(g['key'])}</td><td>{escape(g['status'])}</td><td>{g['attempts']}</td>"
                   f"<td>{escape(g['reason'] or '')}</td></tr>" for g in doc["failed"])
    return Markup("<h3>GPUs that failed</h3><table class=\"grid\"><tr><th>GPU</th><th>status</th>"
                  f"<th>attempts</th><th>reason</th></tr>{rows}</table>")


STYLE = Markup("<style>.fleet-heat{overflow-x:auto}.fleet-heat td.fc{width:11px;min-width:11px;height:16px;"
               "padding:0;border:1px solid #eee;text-align:center;font-size:9px}.fleet-heat td.out"
               "{outline:1px solid #000}.fleet-heat th.fm{height:140px;vertical-align:bottom;padding:0}"
               ".fleet-heat th.fm span{writing-mode:vertical-rl;transform:rotate(180deg);font-size:9px;"
               "white-space:nowrap;font-weight:normal}.fleet-heat th.fg{text-align:right;white-space:nowrap;"
               "font-size:11px}</style>")


def fleet_html(doc: dict) -> Markup:
    from gpudissect.fleet.outliers import conclusions

    ok = [g for g in doc["gpus"] if g["status"] == "done"]
    lede = "".join(f"<li>{escape(c)}</li>" for c in conclusions(doc))
    if doc.get("pair"):
        return Markup(f"<ul>{lede}</ul><p class=note>Two GPUs: no fleet median (it needs three); each measure "
                      f"of {escape(doc['pair']['b'])} against {escape(doc['pair']['a'])}, "
                      f"{escape(doc['pair']['statistic'])}, beyond {doc['threshold'] * 100:g}%.</p>"
                      f"<h3>Differences</h3>{pair_table(doc)}{failed_table(doc)}")
    return Markup(f"{STYLE}<ul>{lede}</ul><p class=note>Each cell: a GPU's deviation from the fleet median "
                  f"({escape(doc['statistic'])}); red above, blue below, full colour at "
                  f"{2 * doc['threshold'] * 100:g}%; outlined beyond the threshold {doc['threshold'] * 100:g}%; "
                  f"&middot; left out (flagged or not measured). {len(ok)} GPU(s).</p>"
                  f"<h3>GPU &times; measure</h3>{heat_map(doc)}<h3>Outliers</h3>{outlier_table(doc)}"
                  f"{failed_table(doc)}")


def fleet_section(rs) -> Markup | None:
    """The fleet page of a result set read from a fleet's results database; None otherwise."""
    src = Path(str(getattr(rs, "source", "")))
    if not src.name.endswith((".db", ".db.gz", ".db.xz")) or not src.is_file():
        return None
    from gpudissect.store.db import StoreError, open_store

    try:
        store = open_store(src)
    except StoreError:
        return None
    try:
        doc = store.get_meta(OUTLIERS_META)
    finally:
        store.close()
    return fleet_html(doc) if doc else None
