"""The prepare report as one self-contained HTML page (inline CSS and SVG, no script, no network):
key figures, a table of steps, time and removal charts, the kept-length histogram with percentiles,
and a few rejected documents per reason. Every text a user controls is escaped."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any, Protocol

import numpy as np

from .report_charts import bar_chart, histogram

__all__ = ["render_page"]


class RunReport(Protocol):
    """What the page reads of a ``report.RunReport`` (declared here: that module imports this one)."""

    @property
    def output(self) -> str: ...
    @property
    def totals(self) -> dict[str, int]: ...
    @property
    def skipped(self) -> dict[str, int]: ...
    @property
    def steps(self) -> dict[str, dict[str, int]]: ...
    @property
    def lengths(self) -> np.ndarray: ...
    @property
    def costs(self) -> dict[str, dict[str, int]]: ...
    @property
    def stages(self) -> dict[str, int]: ...
    @property
    def created(self) -> str: ...
    @property
    def tokenizer(self) -> str: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def parts(self) -> int: ...
    @property
    def bytes_out(self) -> int: ...
    @property
    def version(self) -> str: ...
    @property
    def rejected_files(self) -> tuple[str, ...]: ...
    @property
    def rejected(self) -> tuple[Any, ...]: ...  # report_rejects.RejectedRecord

    def accounted(self) -> float: ...


_BINS = 24  # log-spaced length histogram bins
_EXCERPT = 300  # characters of a rejected document shown
_INPUTS_SHOWN = 8

_STYLE = """
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2430;margin:0;background:#f7f8fa}
main{max-width:68rem;margin:0 auto;padding:1.5rem 1rem 3rem}
h1{font-size:1.6rem;margin:0 0 .2rem}h2{font-size:1.2rem;margin:2rem 0 .6rem}h3{font-size:1rem;margin:1rem 0 .4rem}
.sub,.note{color:#5a6473}.sub{margin:0 0 1rem;overflow-wrap:anywhere}.note{font-size:.9rem}
code{font-size:.9em;background:#eef0f4;padding:0 .25em;border-radius:3px;overflow-wrap:anywhere}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(9.5rem,1fr));gap:.6rem;margin:0;padding:0}
.figures div{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.5rem .7rem}
.figures dt{font-size:.8rem;color:#5a6473}.figures dd{margin:0;font-size:1.25rem;font-weight:600;white-space:nowrap}
.box{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.6rem;max-width:100%}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.9rem;font-variant-numeric:tabular-nums}
th,td{padding:.35rem .6rem;border-bottom:1px solid #e6e9ee;vertical-align:top;text-align:left}
th{background:#f0f2f5;font-weight:600;vertical-align:bottom}th.n,td.n{text-align:right}td.n{white-space:nowrap}
td.label{overflow-wrap:anywhere;min-width:11rem}.fit{width:fit-content}
td ul{margin:0;padding:0;list-style:none}td li{white-space:nowrap}
ul.inputs{margin:.2rem 0 0;padding-left:1.2rem}ul.inputs li{overflow-wrap:anywhere}
svg.chart{display:block;max-width:100%;height:auto;font-family:inherit}
svg .label,svg .value,svg .tick{font-size:12px;fill:#1d2430}svg .axis-title{font-size:13px;font-weight:600;fill:#1d2430}
svg .axis{stroke:#5a6473;stroke-width:1}svg .grid{stroke:#e6e9ee;stroke-width:1}
.reject{background:#fff;border:1px solid #dde1e8;border-left:4px solid #c0504d;border-radius:4px;
padding:.4rem .7rem;margin:.4rem 0}
@media (max-width:900px){main{padding:1rem .75rem 2rem}table{font-size:.82rem}th,td{padding:.3rem .4rem}
td.label{min-width:8rem}.box{padding:.4rem}}
.reject .id{font-size:.8rem;color:#5a6473;overflow-wrap:anywhere}
.reject p{margin:.2rem 0 0;white-space:pre-wrap;overflow-wrap:anywhere}
"""


def render_page(report: RunReport) -> str:
    """The whole page of ``report``."""
    title = f"prepare report: {report.output}"
    sections = [
        _header(report),
        _steps_section(report),
        _time_section(report),
        _removals_section(report),
        _lengths_section(report),
        _rejected_section(report),
    ]
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n<body><main>\n"
        + "\n".join(section for section in sections if section)
        + f"\n<p class='note'>Made by tokenport {escape(report.version)} "
        "(<code>tokenport report OUTPUT --html PAGE</code>).</p>\n</main></body></html>\n"
    )


def _header(report: RunReport) -> str:
    """Title, where and when, tokenizer, inputs, and the key figures."""
    t = report.totals
    wall = report.stages.get("wall", 0)
    figures = [
        ("documents kept", f"{t['documents']:,}"),
        ("tokens", f"{t['tokens']:,}"),
        ("MB read", _megabytes(t["bytes_in"])),
        ("MB written", _megabytes(report.bytes_out)),
        ("input files", f"{t['input_files']:,}"),
        ("parts", f"{report.parts:,}"),
    ]
    if wall:
        figures.append(("wall time", f"{wall / 1000:,.1f} s"))
    figures += [(f"skipped: {kind}", f"{n:,}") for kind, n in sorted(report.skipped.items())]
    when = f" · run {escape(report.created.replace('T', ' '))}" if report.created else ""
    shown = "".join(f"<li><code>{escape(name)}</code></li>" for name in report.inputs[:_INPUTS_SHOWN])
    more = len(report.inputs) - _INPUTS_SHOWN
    shown += f"<li>and {more:,} more</li>" if more > 0 else ""
    grid = "".join(f"<div><dt>{escape(k)}</dt><dd>{escape(v)}</dd></div>" for k, v in figures)
    return (
        f"<h1>Prepare report</h1><p class='sub'><code>{escape(report.output)}</code>{when}"
        f" · tokenizer <code>{escape(report.tokenizer or 'unknown')}</code></p>"
        f"<dl class='figures'>{grid}</dl>" + (f"<h3>Inputs</h3><ul class='inputs'>{shown}</ul>" if shown else "")
    )


def _megabytes(count: int) -> str:
    """Bytes as MB: one decimal, three below 1 MB (a small run does not read as 0.0)."""
    return f"{count / 1e6:,.1f}" if count >= 1e6 else f"{count / 1e6:.3f}"


def _counters(counts: dict[str, int], prefix: str) -> dict[str, int]:
    """The ``prefix:NAME`` counters of a step, by NAME."""
    return {k.split(":", 1)[1]: n for k, n in counts.items() if k.startswith(prefix + ":")}


def _changes(counts: dict[str, int]) -> dict[str, int]:
    """A step's counters besides documents and removals: replacements (``replaced:KIND``) and any other change."""
    return {
        k.replace(":", " ", 1) if not k.startswith("replaced:") else k.split(":", 1)[1]: n
        for k, n in counts.items()
        if not k.startswith(("documents_", "removed:"))
    }


def _list_cell(items: dict[str, int]) -> str:
    """A table cell listing ``name count`` lines, or a dash."""
    if not items:
        return "<td>–</td>"
    lines = "".join(f"<li>{escape(name)} <b>{n:,}</b></li>" for name, n in items.items())
    return f"<td><ul>{lines}</ul></td>"


def _steps_section(report: RunReport) -> str:
    """The table of steps: documents in and out, kept share, chars kept, seconds, removals and changes."""
    if not report.steps:
        return "<h2>Steps</h2><p>The run had no cleaning steps (<code>--steps</code>).</p>"
    head = (
        "<tr><th>step</th><th class='n'>documents in</th><th class='n'>documents out</th><th class='n'>kept</th>"
        "<th class='n'>chars kept</th><th class='n'>seconds</th><th>removed, by reason</th>"
        "<th>replaced or changed</th></tr>"
    )
    rows = []
    for label, counts in report.steps.items():
        seen, out = counts.get("documents_in", 0), counts.get("documents_out", 0)
        cost = report.costs.get(label, {})
        chars = f"{cost['chars_out'] / cost['chars_in']:.1%}" if cost.get("chars_in") else "–"
        rows.append(
            f"<tr><td class='label'>{escape(label)}</td><td class='n'>{seen:,}</td><td class='n'>{out:,}</td>"
            f"<td class='n'>{f'{out / seen:.1%}' if seen else '–'}</td><td class='n'>{chars}</td>"
            f"<td class='n'>{cost.get('time_ms', 0) / 1000:,.2f}</td>"
            f"{_list_cell(_counters(counts, 'removed'))}{_list_cell(_changes(counts))}</tr>"
        )
    return (
        "<h2>Steps</h2><div class='box scroll'><table><thead>"
        + head
        + "</thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div><p class='note'>Seconds are the workers' time in each step, all workers added.</p>"
    )


def _seconds(value: float) -> str:
    return f"{value:,.2f} s"


def _time_section(report: RunReport) -> str:
    """The run's wall time by stage, and each step's time, as bars on a seconds axis."""
    stages = [(name, ms / 1000) for name, ms in report.stages.items() if name != "wall"]
    steps = [(label, cost.get("time_ms", 0) / 1000) for label, cost in report.costs.items()]
    if not stages and not steps:
        return ""
    parts = ["<h2>Time</h2>"]
    if stages:
        wall = report.stages.get("wall", 0) / 1000
        parts.append(
            f"<h3>Wall time by stage ({wall:,.2f} s in all, {report.accounted():.0%} accounted for)</h3>"
            + "<div class='box'>"
            + bar_chart(stages, axis="seconds (wall clock)", title="wall time by stage", value_text=_seconds)
            + "</div>"
        )
    if steps and any(seconds > 0 for _, seconds in steps):
        parts.append(
            "<h3>Time in each step (all workers)</h3><div class='box'>"
            + bar_chart(steps, axis="seconds (all workers)", title="time per step", value_text=_seconds)
            + "</div>"
        )
    return "".join(parts)


def _removals_section(report: RunReport) -> str:
    """Documents removed per step and reason."""
    bars = [
        (f"{label} · {reason}", float(n))
        for label, counts in report.steps.items()
        for reason, n in _counters(counts, "removed").items()
    ]
    if not report.steps:
        return ""
    if not bars:
        return "<h2>Removals</h2><p>No step removed documents.</p>"
    chart = bar_chart(
        bars,
        axis="documents removed",
        title="documents removed per step and reason",
        color="#c0504d",
        value_text=_int,
        whole=True,
    )
    return f"<h2>Removals</h2><div class='box'>{chart}</div>"


def _int(value: float) -> str:
    return f"{int(value):,}"


def _lengths_section(report: RunReport) -> str:
    """The kept documents' length histogram, and their percentiles in a small table."""
    lengths = report.lengths
    if not len(lengths):
        return "<h2>Kept lengths</h2><p>No documents were kept.</p>"
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    cells = [("mean", lengths.mean()), ("p50", p50), ("p90", p90), ("p99", p99), ("max", lengths.max())]
    table = (
        "<table><thead><tr>"
        + "".join(f"<th class='n'>{name}</th>" for name, _ in cells)
        + "</tr></thead><tbody><tr>"
        + "".join(f"<td class='n'>{value:,.0f}</td>" for _, value in cells)
        + "</tr></tbody></table>"
    )
    chart = histogram(
        lengths,
        bins=_BINS,
        x_axis="tokens per document (log scale)",
        y_axis="documents",
        title="tokens per kept document",
    )
    return (
        f"<h2>Kept lengths</h2><div class='box'>{chart}</div>"
        f"<h3>Tokens per kept document</h3><div class='box scroll fit'>{table}</div>"
    )


def _rejected_section(report: RunReport) -> str:
    """A few rejected documents per step and reason (``--keep-rejected``), and where all of them are."""
    removed = {(label, reason): n for label, c in report.steps.items() for reason, n in _counters(c, "removed").items()}
    if not removed:
        return ""
    if not report.rejected_files:
        return (
            "<h2>Rejected documents</h2><p>This run did not keep them: prepare again with "
            "<code>--keep-rejected</code> to see examples here (and all of them in <code>OUTPUT/rejected/</code>).</p>"
        )
    groups: dict[tuple[str, str], list[str]] = {}
    for record in report.rejected:
        text = record.text if len(record.text) <= _EXCERPT else record.text[:_EXCERPT] + " …"
        groups.setdefault((record.step, record.reason), []).append(
            f"<div class='reject'><div class='id'>{escape(record.id)}</div><p>{escape(text)}</p></div>"
        )
    blocks = [
        f"<h3>{escape(step)} · {escape(reason)} <span class='note'>({removed.get((step, reason), len(items)):,} "
        f"removed; {len(items)} shown)</span></h3>" + "".join(items)
        for (step, reason), items in sorted(groups.items(), key=lambda item: _place(list(removed), item[0]))
    ]
    where = "".join(f"<li><code>{escape(name)}</code></li>" for name in _paths(report.output, report.rejected_files))
    return (
        "<h2>Rejected documents</h2><p class='note'>A few per step and reason. All of them, one JSON line each "
        f"(id, step, reason, text, metadata), are in:</p><ul class='inputs'>{where}</ul>" + "".join(blocks)
    )


def _place(order: list[tuple[str, str]], key: tuple[str, str]) -> int:
    """Where a (step, reason) comes in the steps' table (reasons it does not count come last)."""
    return order.index(key) if key in order else len(order)


def _paths(output: str, names: Iterable[str]) -> list[str]:
    """``names`` under ``output``, as a user would type them."""
    return [f"{output.rstrip('/')}/{name}" for name in names]
