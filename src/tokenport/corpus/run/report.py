"""What a `prepare` run did, from its output: totals, each step's documents in and out with the
reasons it removed documents, and the length distribution of what was kept; as text for a
terminal, or as one self-contained HTML page with SVG charts (no plotting library needed)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ConfigError, StorageError
from ...indexed import IndexedDataset
from .report_html import render_page
from .report_rejects import RejectedRecord, sample_rejected
from .state import MANIFEST_NAME, read_manifest, replace_atomically, temporary_path

__all__ = ["RunReport", "load_report"]


@dataclass(frozen=True)
class RunReport:
    """The numbers of one finished prepare run."""

    output: str
    totals: dict[str, int]
    skipped: dict[str, int]
    steps: dict[str, dict[str, int]]
    lengths: np.ndarray  # tokens per kept document
    costs: dict[str, dict[str, int]] = field(default_factory=dict)  # per step: chars_in, chars_out, time_ms
    stages: dict[str, int] = field(default_factory=dict)  # the run's wall time by stage, and "wall" (ms)
    unit_stages: dict[str, int] = field(default_factory=dict)  # the workers' time by stage (ms), besides the steps'
    created: str = ""  # when the run finished (the manifest's ISO time)
    tokenizer: str = ""  # the tokenizer's spec
    inputs: tuple[str, ...] = ()  # the input files read
    parts: int = 0
    bytes_out: int = 0  # the parts' .bin and .idx bytes
    version: str = ""  # the tokenport that made the run
    rejected_files: tuple[str, ...] = ()  # rejected/*.jsonl (--keep-rejected), relative to output
    rejected: tuple[RejectedRecord, ...] = ()  # a few of them per step and reason

    def accounted(self) -> float:
        """The share of the run's recorded wall time its stages account for (0 when none were recorded)."""
        wall = self.stages.get("wall", 0)
        return sum(ms for name, ms in self.stages.items() if name != "wall") / wall if wall else 0.0

    def render(self) -> str:
        """Plain-text tables."""
        t = self.totals
        lines = [
            f"prepare run in {self.output}",
            f"  {t['documents']:,} documents, {t['tokens']:,} tokens, {t['bytes_in'] / 1e6:,.1f} MB read "
            f"from {t['input_files']:,} files",
        ]
        if self.skipped:
            lines.append("  skipped input: " + ", ".join(f"{k} {n:,}" for k, n in sorted(self.skipped.items())))
        if self.steps:
            lines.append("")
            lines.append(
                f"  {'step':<24}{'in':>12}{'out':>12}{'kept':>8}{'chars kept':>12}{'seconds':>9}  removed / changed"
            )
            for label, counts in self.steps.items():
                seen, out = counts.get("documents_in", 0), counts.get("documents_out", 0)
                share = f"{out / seen:.1%}" if seen else "-"
                cost = self.costs.get(label, {})
                chars = f"{cost['chars_out'] / cost['chars_in']:.1%}" if cost.get("chars_in") else "-"
                seconds = f"{cost.get('time_ms', 0) / 1000:.2f}"
                details = ", ".join(f"{k} {n:,}" for k, n in counts.items() if not k.startswith("documents_"))
                lines.append(f"  {label:<24}{seen:>12,}{out:>12,}{share:>8}{chars:>12}{seconds:>9}  {details}")
        lines += self._render_stages()
        if len(self.lengths):
            p = np.percentile(self.lengths, [5, 50, 95, 99])
            lines.append("")
            lines.append(
                f"  tokens per document: mean {self.lengths.mean():,.1f}, p5 {p[0]:,.0f}, median {p[1]:,.0f}, "
                f"p95 {p[2]:,.0f}, p99 {p[3]:,.0f}, max {int(self.lengths.max()):,}"
            )
        return "\n".join(lines)

    def _render_stages(self) -> list[str]:
        """Where the run's wall time went, by stage; and the workers' time by stage, steps included."""
        wall = self.stages.get("wall", 0)
        if not wall:
            return []
        lines = ["", f"  {'stage':<32}{'seconds':>9}{'of wall':>9}"]
        for name, ms in self.stages.items():
            if name != "wall":
                lines.append(f"  {name:<32}{ms / 1000:>9.2f}{ms / wall:>9.1%}")
        lines.append(f"  {'accounted for':<32}{wall * self.accounted() / 1000:>9.2f}{self.accounted():>9.1%}")
        work = dict(self.unit_stages)
        steps = sum(cost.get("time_ms", 0) for cost in self.costs.values())
        if work or steps:
            parts = [("read", work.pop("read", 0)), ("steps", steps), *work.items()]
            lines.append(
                "  in the units (seconds, all workers): " + ", ".join(f"{k} {ms / 1000:.2f}" for k, ms in parts)
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        """The numbers as JSON-able data; kept lengths as their count, mean, percentiles and maximum."""
        lengths: dict[str, Any] = {"documents": int(len(self.lengths))}
        if len(self.lengths):
            p = np.percentile(self.lengths, [5, 50, 95, 99])
            lengths.update(
                mean=float(self.lengths.mean()),
                p5=float(p[0]),
                p50=float(p[1]),
                p95=float(p[2]),
                p99=float(p[3]),
                max=int(self.lengths.max()),
            )
        return {
            "output": self.output,
            "totals": dict(self.totals),
            "skipped": dict(self.skipped),
            "steps": {label: dict(counts) for label, counts in self.steps.items()},
            "costs": {label: dict(cost) for label, cost in self.costs.items()},
            "stages": dict(self.stages),
            "unit_stages": dict(self.unit_stages),
            "lengths": lengths,
        }

    def save_html(self, path: str) -> None:
        """Write `html()` to `path` atomically (a temporary beside it, then a rename): a failed or
        killed write leaves no half-written page and no temporary."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise ConfigError(f"html={path!r} is invalid: pass the path of the HTML file to write (--html PATH)")
        page = self.html()  # rendered first: a failure leaves nothing behind
        temporary = temporary_path(path)
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                f.write(page)
            replace_atomically(temporary, path)
        except OSError as exc:
            raise StorageError(
                f"{path}: cannot write the HTML report ({exc.strerror}); pass a file path in a writable directory"
            ) from None
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)

    def html(self) -> str:
        """One self-contained HTML page: key figures, the steps' table, time and removal charts, the
        kept-length histogram, and a few rejected documents per reason (``report_html``)."""
        return render_page(self)


def load_report(output: str) -> RunReport:
    """The report of the finished prepare output in directory ``output``."""
    manifest = read_manifest(os.path.join(output, MANIFEST_NAME))
    if manifest is None:
        raise ConfigError(f"{output}: no tokenport.json here; pass the output directory of a finished prepare run")
    lengths, bytes_out = [], 0
    for part in manifest.get("parts", []):
        prefix = os.path.join(output, part["name"])
        with IndexedDataset(prefix) as ds:
            lengths.append(np.asarray(ds.sequence_lengths, dtype=np.int64))
        bytes_out += sum(os.path.getsize(prefix + suffix) for suffix in (".bin", ".idx"))
    rejected_files = tuple(manifest.get("rejected") or ())
    return RunReport(
        output=output,
        totals=manifest["totals"],
        skipped=dict(manifest.get("skipped", {})),
        steps={label: dict(counts) for label, counts in manifest.get("steps", {}).items()},
        lengths=np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64),
        costs={label: dict(counts) for label, counts in manifest.get("step_costs", {}).items()},
        stages=dict(sorted(manifest.get("stages", {}).items(), key=_run_order)),
        unit_stages=dict(manifest.get("unit_stages", {})),
        created=manifest["created"],
        tokenizer=str(manifest["tokenizer"].get("spec") or manifest["tokenizer"].get("name") or ""),
        inputs=tuple(str(entry["path"]) for entry in manifest.get("inputs") or ()),
        parts=len(manifest["parts"]),
        bytes_out=bytes_out,
        version=manifest["tokenport_version"],
        rejected_files=rejected_files,
        rejected=sample_rejected(output, rejected_files),
    )


_STAGES = ("start", "plan", "dedup", "units", "stop workers", "input digests", "assemble", "finish")


def _run_order(item: tuple[str, int]) -> tuple[int, int, str]:
    """A stage's place in a run (the manifest keeps them sorted by name): a dedup step's keys and
    decision (``N:kind keys``, ``N:kind decide``) by its position, between planning and the units."""
    name = item[0]
    head = name.split(":", 1)[0]
    if head.isdigit():
        return _STAGES.index("dedup"), int(head), name.rsplit(" ", 1)[-1].replace("keys", "a")
    return (_STAGES.index(name) if name in _STAGES else len(_STAGES) + (name == "wall")), 0, name
