"""Headless Chromium for page tests: screenshots at a window width, and a layout measure (the page's
scroll width, each table's and chart's box, text overflowing its box) read from the dumped DOM."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import tempfile
from html import unescape

import pytest

TIMEOUT = 60  # seconds one Chromium run may take

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

# Appended to a copy of the page: writes the layout, as JSON, into <body data-layout>.
_MEASURE = """<script>
(function () {
  function box(e) { var r = e.getBoundingClientRect(); return {left: r.left, right: r.right, width: r.width}; }
  var overflowing = [];
  document.querySelectorAll('body *').forEach(function (e) {
    if (e.closest('svg') || e.tagName === 'SCRIPT') return;
    var style = getComputedStyle(e);
    if (style.overflowX !== 'visible') return;
    if (e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0) overflowing.push(e.tagName + '.' + e.className);
  });
  var charts = [];
  document.querySelectorAll('svg').forEach(function (s) {
    var outer = s.getBoundingClientRect(), out = [];
    s.querySelectorAll('text').forEach(function (t) {
      var r = t.getBoundingClientRect();
      if (r.left < outer.left - 1 || r.right > outer.right + 1 || r.top < outer.top - 1 || r.bottom > outer.bottom + 1)
        out.push(t.textContent);
    });
    charts.push({box: box(s), texts: Array.from(s.querySelectorAll('text')).map(function (t) { return t.textContent; }),
                 outside: out, parent: box(s.parentElement)});
  });
  var tables = Array.from(document.querySelectorAll('table')).map(function (t) {
    return {box: box(t), parent: box(t.parentElement)};
  });
  document.body.setAttribute('data-layout', JSON.stringify({
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
    overflowing: overflowing, charts: charts, tables: tables}));
})();
</script>"""


def chromium() -> str:
    """The Chromium executable; the test is skipped, saying why, when there is none."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium): the page's layout is not checked")
    return path


def _run(arguments: list[str], width: int, height: int) -> str:
    """Run Chromium headless at a ``width`` x ``height`` window with a fresh profile; its stdout."""
    with tempfile.TemporaryDirectory() as profile:
        command = [chromium(), *_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", *arguments]
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(page: pathlib.Path, png: pathlib.Path, width: int, height: int = 3000) -> pathlib.Path:
    """A screenshot of ``page`` in a window ``width`` pixels wide, written to ``png``."""
    _run([f"--screenshot={png}", page.resolve().as_uri()], width, height)
    assert png.exists(), f"chromium wrote no screenshot to {png}"
    return png


def layout(page: pathlib.Path, width: int, height: int = 1000) -> dict:
    """The layout of ``page`` at a window ``width`` pixels wide: scrollWidth, innerWidth, overflowing
    elements, each chart's box, text and text outside it, and each table's box and its container's."""
    measured = page.with_name(page.stem + ".measure.html")
    text = page.read_text(encoding="utf-8")
    text = text.replace("</body>", _MEASURE + "</body>") if "</body>" in text else text + _MEASURE
    measured.write_text(text, encoding="utf-8")
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", measured.resolve().as_uri()], width, height)
    found = re.search(r"data-layout=\"([^\"]*)\"", dom)
    assert found, "the measuring script left no data-layout on <body>"
    return json.loads(unescape(found.group(1)))
