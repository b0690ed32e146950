"""The report page in a real headless Chromium at 1,400 and 800 px: the page never scrolls sideways,
every chart fits its box with its labels inside it, wide tables scroll inside their own box."""

from __future__ import annotations

import pytest

from tests._support import browser
from tests.corpus.test_report_html import prepared_run
from tokenport.corpus.run.report import load_report

AXIS_TITLES = {"seconds (wall clock)", "documents removed", "tokens per document (log scale)", "documents"}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    browser.chromium()  # skips, saying why, without Chromium
    root = tmp_path_factory.mktemp("browser")
    path = root / "report.html"
    load_report(str(prepared_run(root))).save_html(str(path))
    return path


@pytest.mark.parametrize("width", [1400, 800])
def test_the_page_fits_the_window_and_its_charts_keep_their_labels(page, width):
    layout = browser.layout(page, width)
    assert layout["innerWidth"] == width
    assert layout["scrollWidth"] <= width, "the page scrolls sideways"
    assert layout["overflowing"] == [], "text overflows its box"
    assert len(layout["charts"]) >= 3
    texts = set()
    for chart in layout["charts"]:
        assert chart["box"]["right"] <= chart["parent"]["right"] + 1 and chart["box"]["left"] >= 0
        assert chart["outside"] == [], f"chart labels drawn outside the chart: {chart['outside']}"
        texts.update(chart["texts"])
    assert AXIS_TITLES <= texts
    for table in layout["tables"]:  # a table wider than its box scrolls inside it: the box itself fits
        assert table["parent"]["right"] <= width


@pytest.mark.parametrize("width", [1400, 800])
def test_screenshots_are_taken(page, width):
    png = browser.screenshot(page, page.with_name(f"report-{width}.png"), width, 2400)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
