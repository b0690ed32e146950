"""What a finished prepare run says about its outcome: steps that removed every document they saw, and
why a run produced no documents at all."""

from __future__ import annotations

import logging

from .stats import UnitStats

__all__ = ["nothing_left", "warn_of_steps_that_removed_everything"]

logger = logging.getLogger("tokenport.corpus.run.pipeline")  # the run's own logger: its warnings stay under one name


def warn_of_steps_that_removed_everything(totals: UnitStats) -> None:
    """A loud warning for each step that dropped every document it saw: almost always a wrong option."""
    for label, counts in totals.steps.items():
        if counts.get("documents_in", 0) and not counts.get("documents_out", 0):
            reasons = ", ".join(f"{key[8:]} {n:,}" for key, n in sorted(counts.items()) if key.startswith("removed:"))
            logger.warning(
                "step %s removed all %s documents it saw (%s); check its options",
                label,
                f"{counts['documents_in']:,}",
                reasons or "no reason counted",
            )


def nothing_left(output: str, totals: UnitStats, files: int) -> str:
    """Why a run produced no documents, and what to do (the message of its InputDataError)."""
    why = []
    if totals.skipped:
        why.append(
            "input was skipped as malformed ("
            + ", ".join(f"{kind} {n:,}" for kind, n in sorted(totals.skipped.items()))
            + ")"
        )
    emptied = [
        label
        for label, counts in totals.steps.items()
        if counts.get("documents_in", 0) and not counts.get("documents_out", 0)
    ]
    if emptied:
        why.append(f"cleaning step {emptied[0]} removed every document it saw (check its options)")
    if not why:
        why.append(f"the {files} input file(s) ({totals.bytes_in:,} bytes) hold no documents; check the inputs")
    return (
        f"{output}: prepare produced no documents: {'; '.join(why)}. Nothing was written; pass "
        "allow_empty=True (--allow-empty) if an empty output is what you want"
    )
