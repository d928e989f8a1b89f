"""The HTML report in a real headless browser (Debian's chromium) at 1400 px: the page loads
offline, its script runs (the instruction table is built, sortable and filterable), the tables
exist and every picture decodes with a nonzero size. A screenshot is kept under
test-artifacts/.

And what a reader sees: the page is of a readable height with every raw dump folded, nothing
sticks out of the page (the tables wrap or scroll), and each figure shows its data: a figure
whose data are separate bands (one row per SM of a dispatch timeline, one bar per bandwidth
level or tensor type) says how many (``data-bands``), and the probe counts the coloured bands
the picture shows at the size the page shows it.

Without chromium the test is skipped locally, but fails when CI=true (CI installs it)."""

from __future__ import annotations

import html as _html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_synth import BANDWIDTH, INSTR, TIMELINE_SMS, write_data_dir

from gpudissect.report.assemble.html import write_html
from gpudissect.report.read.results import load_result_set

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
H100 = ROOT / "data" / "h100"
WIDTH = 1400  # the page width the report is judged at
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", f"--window-size={WIDTH},2400"]
# The H100 report must stay under this height (CSS px at 1400 px wide, every <details>
# closed as it opens). The report of issue 17 is about 21,000 px: the key tables, findings
# as tables, the figures, with the raw dumps folded and the long tables in scroll boxes of
# 640 px; it was 371,000 px with the dumps open. 40,000 leaves room for a suite to grow a
# table or a figure, and fails as soon as a dump is shown open again (the tensor summary alone
# is over 100,000 px) or a long table loses its scroll box (513 instruction rows: ~12,000 px).
# With the cluster, async and sync suites and the fleet page (seven suites) the H100 report is
# about 41,000 px; with the fairness, efficacy, bank and predictor-validation sections about
# 51,000 px; 62,000 keeps the same margin, and an open dump (over 100,000 px) or a lost scroll box
# (837 instruction rows: ~19,000 px more) still exceeds it.
MAX_HEIGHT_PX = 62_000

# Injected by the test (not part of the report): after load, the page's size with every
# <details> as it opens, then every <details> opened and each picture measured: its drawn
# size, and the coloured bands (saturated pixels: bars, not axes, text or grey lines) along
# its data-band-axis inside its data-band-box (the plot area, as fractions of the picture).
PROBE = r"""<script>
window.addEventListener("load", function () {
  var de = document.documentElement, out = {height: de.scrollHeight, width: de.scrollWidth,
    viewport: window.innerWidth, raw: document.querySelectorAll("details.raw").length,
    raw_open: document.querySelectorAll("details.raw[open]").length, figures: [], tables: []};
  Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) { d.open = true; });
  out.width_open = de.scrollWidth;
  Array.prototype.forEach.call(document.querySelectorAll(".tablebox > table"), function (t) {
    out.tables.push({id: t.id, width: t.offsetWidth, box: t.parentElement.clientWidth});
  });
  Array.prototype.forEach.call(document.images, function (im) {
    var r = im.getBoundingClientRect(), w = im.width, h = im.height;  // content box, no border
    var f = {name: im.alt, natural: [im.naturalWidth, im.naturalHeight], shown: [w, h],
             right: Math.round(r.right), expect: im.getAttribute("data-bands")};
    try {
      var c = document.createElement("canvas"); c.width = w; c.height = h;
      var ctx = c.getContext("2d"); ctx.drawImage(im, 0, 0, w, h);
      var b = (im.getAttribute("data-band-box") || "0,0,1,1").split(",").map(Number);
      var x0 = Math.ceil(b[0] * w) + 2, y0 = Math.ceil(b[1] * h) + 2;
      var W = Math.floor(b[2] * w) - 2 - x0, H = Math.floor(b[3] * h) - 2 - y0;
      var d = ctx.getImageData(x0, y0, W, H).data, ys = im.getAttribute("data-band-axis") !== "x";
      var line = new Array(ys ? H : W).fill(false), coloured = 0;
      for (var y = 0; y < H; y++) for (var x = 0; x < W; x++) {
        var k = 4 * (y * W + x);
        if (d[k + 3] > 128 && Math.max(d[k], d[k + 1], d[k + 2]) - Math.min(d[k], d[k + 1], d[k + 2]) > 50) {
          coloured++; line[ys ? y : x] = true;
        }
      }
      var bands = 0;
      for (var i = 0; i < line.length; i++) if (line[i] && (i === 0 || !line[i - 1])) bands++;
      f.bands = bands; f.coloured = coloured / Math.max(1, W * H);
    } catch (e) { f.error = String(e); }
    out.figures.push(f);
  });
  var el = document.createElement("pre"); el.id = "probe"; el.textContent = JSON.stringify(out);
  document.body.appendChild(el);
});
</script></body>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("chromium not found: CI must install it (.ci/run) so the browser test runs")
    pytest.skip("chromium not installed (apt-get install chromium)")


def _run(browser: str, args: list[str], profile: Path) -> str:
    proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _check_page(browser: str, html: Path, tmp: Path, shot: Path) -> dict[str, str]:
    dom = _run(browser, ["--virtual-time-budget=5000", "--dump-dom", html.as_uri()], tmp / "p1")
    m = re.search(r'<div id="render-check"([^>]*)>', dom)
    assert m, "the page did not render (no render-check element in the DOM)"
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', m.group(1)))
    assert attrs.get("js") == "ran", f"the report's script did not run: {attrs}"
    _run(browser, ["--hide-scrollbars", f"--screenshot={shot}", html.as_uri()], tmp / "p2")
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    return attrs


def _probe(browser: str, html: Path, tmp: Path) -> dict:
    """The page as a reader gets it (see PROBE), from a copy with the probe script added."""
    probed = tmp / f"probed-{html.name}"
    probed.write_text(html.read_text().replace("</body>", PROBE, 1))
    dom = _run(browser, ["--virtual-time-budget=10000", "--dump-dom", probed.as_uri()], tmp / "p3")
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, "the probe did not run"
    return json.loads(_html.unescape(m.group(1)))


def _check_reader_view(page: dict, max_height: int) -> dict[str, dict]:
    """What holds for every report: folded dumps, nothing wider than the page, tables that fit
    their boxes, every figure drawn with coloured marks and, where it has bands, all of them."""
    assert page["raw"] >= 1 and page["raw_open"] == 0, "raw dumps must start folded"
    assert page["height"] <= max_height, f"page is {page['height']} px tall (bound {max_height})"
    assert page["width"] <= page["viewport"] and page["width_open"] <= page["viewport"], page
    for t in page["tables"]:  # wrapping columns: no table needs its box's horizontal scroll
        assert t["width"] <= t["box"] + 1, f"table {t['id']} ({t['width']} px) overflows its box ({t['box']} px)"
    figs = {f["name"]: f for f in page["figures"]}
    for name, f in figs.items():
        assert "error" not in f, (name, f)
        assert f["shown"][0] > 0 and f["right"] <= page["viewport"], (name, f)
        assert f["coloured"] > 0.001, f"{name} shows no data: {f}"
        if f["expect"] is not None:
            assert f["shown"] == f["natural"], f"{name} is scaled ({f}): its bands are checked at full size"
            assert f["bands"] == int(f["expect"]), f"{name} shows {f['bands']} of its {f['expect']} bands"
    return figs


def test_report_renders_in_headless_chromium(tmp_path):
    browser = _chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    data = write_data_dir(tmp_path / "synth")
    page = write_html(load_result_set(data), tmp_path / "synthetic.html", data)
    attrs = _check_page(browser, page, tmp_path, ARTIFACTS / "report-synthetic.png")
    assert int(attrs["instr-rows"]) == len(INSTR)
    assert int(attrs["instr-visible"]) == len(INSTR)  # the filter starts empty: every row shown
    assert int(attrs["tables"]) >= 6
    assert int(attrs["images"]) >= 1 and attrs["images-ok"] == attrs["images"], attrs
    figs = _check_reader_view(_probe(browser, page, tmp_path), MAX_HEIGHT_PX)
    assert figs["behaviour_timeline_1d-free"]["bands"] == TIMELINE_SMS  # a row per SM
    assert figs["memory_bandwidth"]["bands"] == len(BANDWIDTH)  # a bar per level
    assert figs["tensor_throughput"]["bands"] == 2  # f16 and s8 (b1 and loads have no datasheet peak)


@pytest.mark.slow
@pytest.mark.skipif(not (H100 / "instructions.json.xz").exists(), reason="no committed H100 data")
def test_committed_h100_report_renders_in_headless_chromium(tmp_path):
    browser = _chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    rs = load_result_set(H100)
    page = write_html(rs, tmp_path / "h100.html", H100)
    attrs = _check_page(browser, page, tmp_path, ARTIFACTS / "report-h100.png")
    n = len({r["variant"] for r in rs.records("instructions")})
    assert int(attrs["instr-rows"]) == n
    assert int(attrs["images"]) >= 1 and attrs["images-ok"] == attrs["images"], attrs
    figs = _check_reader_view(_probe(browser, page, tmp_path), MAX_HEIGHT_PX)
    for probe in ("dispatch:1d-1perSM", "dispatch:1d-free", "dispatch:regs"):
        rec = next(r for r in rs.records("behaviour") if r["variant"] == probe)
        trace = rec["samples"].get("launches", [rec["samples"]])[0]  # the launch the figure draws
        sms = len(set(trace["smid"]))  # the SMs in the data: each must have its row
        assert figs["behaviour_timeline_" + probe.split(":", 1)[1]]["bands"] == sms, probe
    bw = [r for r in rs.records("memory") if r["variant"].startswith("bandwidth/") and r["value"] is not None]
    assert figs["memory_bandwidth"]["bands"] == len(bw)
