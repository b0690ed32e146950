"""Inline SVG charts for the prepare report page: horizontal bars on a labelled value axis, and a
histogram over log-spaced bins with both axes labelled. No plotting library, no script: each chart
scales to its box (a viewBox, width 100%) and keeps every label inside it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

import numpy as np

__all__ = ["bar_chart", "histogram", "nice_ticks"]

_WIDTH = 760  # viewBox width; the page draws it at its column's width
_CHAR = 6.6  # a 12px sans-serif character's width, about
_LABEL_CHARS = 44  # longer bar labels are cut (the whole label stays in the bar's tooltip)
_ROW = 24


def nice_ticks(top: float, count: int = 5, *, whole: bool = False) -> list[float]:
    """Ticks 0, s, 2s, ... up to the first at or above ``top``, with s a 1, 2 or 5 times a power of ten
    (at least 1 when ``whole``: counts have no halves)."""
    if not top > 0:
        return [0.0, 1.0]
    raw = max(top / count, 1.0) if whole else top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _number(value: float) -> str:
    """A value's label: thousands separated, at most two decimals, no trailing zeros."""
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return text or "0"


def _tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels of evenly spaced ticks, with as many decimals as their step needs (0.005 apart: 0.005, 0.01)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    return [f"{tick:,.{decimals}f}" for tick in ticks]


def _cut(label: str) -> str:
    """``label`` shortened to fit a bar label's column (its end kept: it tells labels apart)."""
    return label if len(label) <= _LABEL_CHARS else "…" + label[-(_LABEL_CHARS - 1) :]


def _svg(height: float, body: str, title: str) -> str:
    """An SVG element of the page's chart width, drawn at its container's width."""
    return (
        f"<svg class='chart' viewBox='0 0 {_WIDTH} {height:.0f}' width='100%' role='img' "
        f"aria-label='{escape(title)}' xmlns='http://www.w3.org/2000/svg'>{body}</svg>"
    )


def bar_chart(
    bars: Sequence[tuple[str, float]],
    *,
    axis: str,
    title: str,
    value_text: Callable[[float], str] = _number,
    color: str = "#4f81bd",
    whole: bool = False,
) -> str:
    """One horizontal bar per (label, value) on a value axis with ticks, titled ``axis`` (whole-number
    ticks when ``whole``)."""
    label_width = min(_LABEL_CHARS, max(len(_cut(label)) for label, _ in bars)) * _CHAR + 12
    ticks = nice_ticks(max(value for _, value in bars), whole=whole)
    left, right = label_width, _WIDTH - 84  # room on the right for the longest bar's value
    scale = (right - left) / ticks[-1]
    parts = []
    for i, (label, value) in enumerate(bars):
        y = 8 + i * _ROW
        length = value * scale
        parts.append(
            f"<g><title>{escape(label)}: {escape(value_text(value))}</title>"
            f"<text x='{left - 8}' y='{y + 16}' text-anchor='end' class='label'>{escape(_cut(label))}</text>"
            f"<rect x='{left}' y='{y + 4}' width='{length:.1f}' height='{_ROW - 8}' fill='{color}'/>"
            f"<text x='{left + length + 4:.1f}' y='{y + 16}' class='value'>{escape(value_text(value))}</text></g>"
        )
    base = 8 + len(bars) * _ROW + 4
    parts.append(f"<line x1='{left}' x2='{left}' y1='8' y2='{base}' class='axis'/>")
    parts.append(f"<line x1='{left}' x2='{right}' y1='{base}' y2='{base}' class='axis'/>")
    for tick, text in zip(ticks, _tick_labels(ticks)):
        x = left + tick * scale
        parts.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{base}' y2='{base + 5}' class='axis'/>"
            f"<text x='{x:.1f}' y='{base + 18}' text-anchor='middle' class='tick'>{text}</text>"
        )
    parts.append(
        f"<text x='{(left + right) / 2:.1f}' y='{base + 38}' text-anchor='middle' class='axis-title'>"
        f"{escape(axis)}</text>"
    )
    return _svg(base + 46, "".join(parts), title)


def histogram(lengths: np.ndarray, *, bins: int, x_axis: str, y_axis: str, title: str) -> str:
    """Document counts of ``lengths`` in ``bins`` log-spaced bins, x and y axes with ticks and titles."""
    low, high = max(1, int(lengths.min())), max(2, int(lengths.max()) + 1)
    edges = np.unique(np.geomspace(low, high, bins + 1).round().astype(np.int64))
    counts, edges = np.histogram(np.clip(lengths, low, None), bins=edges)
    left, right, top, bottom = 64, _WIDTH - 16, 12, 220
    ticks = nice_ticks(int(counts.max()), whole=True)
    scale = (bottom - top) / ticks[-1]
    log_low, log_span = math.log(edges[0]), math.log(edges[-1]) - math.log(edges[0])

    def x_of(value: float) -> float:
        return left + (right - left) * (math.log(value) - log_low) / log_span

    parts = []
    for tick, text in zip(ticks, _tick_labels(ticks)):  # the grid first: the bars are drawn over it
        y = bottom - tick * scale
        parts.append(
            f"<line x1='{left - 5}' x2='{left}' y1='{y:.1f}' y2='{y:.1f}' class='axis'/>"
            f"<line x1='{left}' x2='{right}' y1='{y:.1f}' y2='{y:.1f}' class='grid'/>"
            f"<text x='{left - 8}' y='{y + 4:.1f}' text-anchor='end' class='tick'>{text}</text>"
        )
    for i, n in enumerate(counts):
        x0, x1 = x_of(edges[i]), x_of(edges[i + 1])
        h = n * scale
        parts.append(
            f"<rect x='{x0 + 0.5:.1f}' y='{bottom - h:.1f}' width='{max(x1 - x0 - 1, 0.5):.1f}' height='{h:.1f}' "
            f"fill='#4f81bd'><title>{edges[i]:,}–{edges[i + 1] - 1:,} tokens: {n:,} documents</title></rect>"
        )
    parts.append(f"<line x1='{left}' x2='{right}' y1='{bottom}' y2='{bottom}' class='axis'/>")
    parts.append(f"<line x1='{left}' x2='{left}' y1='{top}' y2='{bottom}' class='axis'/>")
    for value in _log_ticks(int(edges[0]), int(edges[-1])):
        x = x_of(value)
        parts.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{bottom}' y2='{bottom + 5}' class='axis'/>"
            f"<text x='{x:.1f}' y='{bottom + 18}' text-anchor='middle' class='tick'>{_number(value)}</text>"
        )
    parts.append(
        f"<text x='{(left + right) / 2:.1f}' y='{bottom + 40}' text-anchor='middle' class='axis-title'>"
        f"{escape(x_axis)}</text>"
        f"<text transform='translate(16 {(top + bottom) / 2:.1f}) rotate(-90)' text-anchor='middle' "
        f"class='axis-title'>{escape(y_axis)}</text>"
    )
    return _svg(bottom + 50, "".join(parts), title)


def _log_ticks(low: int, high: int) -> list[int]:
    """Readable ticks on a log axis from ``low`` to ``high``: 1, 2 and 5 times powers of ten, thinned to at most 9."""
    ticks = [
        m * 10**p
        for p in range(int(math.log10(low)), int(math.log10(high)) + 1)
        for m in (1, 2, 5)
        if low <= m * 10**p <= high
    ]
    if len(ticks) > 9:
        ticks = [t for t in ticks if str(t)[0] == "1"]
    return ticks or [low, high]
