"""`tokenport report --html`: one self-contained page with a real steps table, labelled charts, the
kept-length percentiles and a few rejected documents per reason; every user text escaped."""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.inputs.documents import Document
from tokenport.corpus.run.report import RunReport, load_report
from tokenport.corpus.run.report_charts import _tick_labels, nice_ticks
from tokenport.corpus.run.report_rejects import RejectedRecord, sample_rejected
from tokenport.corpus.steps.rejects import RejectedWriter

ODD_NAME = 'web & <news> "q".jsonl'
SCRIPT = "<script>alert('x')</script> 12 34 56"
WORDS = "the of and to in data model training token corpus is for with on that this be are".split()


def texts() -> list[str]:
    """Documents of many lengths; some too short or without words, some with PII, two repeated."""
    out = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(8 + i * i * 3)) for i in range(16)]
    out += [SCRIPT] * 5 + ["it is the data"] * 2
    out += [f"mail jane{i}@example.org about the data and the model for the corpus" for i in range(3)]
    return out + ["duplicate of the data and the model for this corpus"] * 3


def prepared_run(root: pathlib.Path, *, keep_rejected: bool = True) -> pathlib.Path:
    """A finished run over ``texts()`` in a file named ``ODD_NAME``, cleaned by three steps."""
    source = root / ODD_NAME
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts()), encoding="utf-8")
    steps = [{"step": "gopher_quality", "min_words": 6}, {"step": "pii"}, {"step": "exact_dedup"}]
    out = root / "out"
    prepare(PrepareConfig([str(source)], str(out), workers=1, steps=steps, keep_rejected=keep_rejected))
    return out


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("report")
    return load_report(str(prepared_run(root))).html()


def test_page_escapes_every_text_the_user_controls(page):
    assert "<script" not in page.lower()  # no document text, and no script of ours
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "web &amp; &lt;news&gt; &quot;q&quot;.jsonl" in page
    assert 'web & <news> "q"' not in page


def test_page_has_figures_a_steps_table_and_labelled_charts(page):
    assert page.startswith("<!doctype html>") and "http" not in page.replace("http://www.w3.org/2000/svg", "")
    for figure in ("documents kept", "tokens", "MB read", "MB written", "input files", "parts", "wall time"):
        assert f"<dt>{figure}</dt>" in page
    assert "tokenizer <code>byte</code>" in page and " · run 20" in page
    table = page[page.index("<table>") : page.index("</table>")]
    assert "<th class='n'>documents in</th>" in table and "<td class='label'>0:gopher_quality</td>" in table
    assert "too_few_words <b>" in table and "email <b>3</b>" in table  # removals and PII replacements
    assert "<td class='n'>29</td>" in table  # documents in, right-aligned
    titles = re.findall(r"class='axis-title'>([^<]*)<", page)
    assert [title for title in titles if title != "seconds (all workers)"] == [  # steps this small may take 0 ms
        "seconds (wall clock)",
        "documents removed",
        "tokens per document (log scale)",
        "documents",
    ]
    for percentile in ("p50", "p90", "p99", "max"):
        assert f"<th class='n'>{percentile}</th>" in page


def test_page_shows_at_most_three_rejected_documents_per_reason_and_where_all_are(page, tmp_path):
    rejected = page[page.index("<h2>Rejected documents</h2>") :]
    assert "out/rejected/unit-" in rejected and ".jsonl</code>" in rejected
    heads = re.findall(r"<h3>([^<]*) <span class='note'>\((\d+) removed; (\d) shown\)", rejected)
    assert ("0:gopher_quality · few_alphabetic_words", "5", "3") in heads
    assert ("2:exact_dedup · duplicate", "4", "3") in heads
    assert all(int(shown) <= 3 for _, _, shown in heads)
    assert rejected.count("<div class='reject'>") == sum(int(shown) for _, _, shown in heads)


def test_a_run_without_kept_rejects_says_how_to_keep_them(tmp_path):
    page = load_report(str(prepared_run(tmp_path, keep_rejected=False))).html()
    assert "prepare again with <code>--keep-rejected</code>" in page and "class='reject'" not in page


def test_long_rejected_documents_are_cut(tmp_path):
    path = tmp_path / "r.jsonl"
    record = {"id": "a:1", "step": "0:s", "reason": "long", "text": "x" * 5000, "metadata": {}}
    path.write_text(json.dumps(record) + "\n")
    (found,) = sample_rejected(str(tmp_path), ["r.jsonl"])
    assert found.text == "x" * 5000
    report = RunReport(
        "o",
        {"documents": 0, "tokens": 0, "bytes_in": 0, "input_files": 0},
        {},
        {"0:s": {"documents_in": 1, "documents_out": 0, "removed:long": 1}},
        np.zeros(0, np.int64),
        rejected_files=("r.jsonl",),
        rejected=(found,),
    )
    assert "x" * 300 + " …</p>" in report.html() and "x" * 301 not in report.html()


def test_damaged_or_missing_rejects_are_refused_naming_the_file(tmp_path):
    out = prepared_run(tmp_path)
    manifest = json.loads((out / "tokenport.json").read_text())
    first = out / manifest["rejected"][0]
    whole = first.read_bytes()
    first.write_bytes(whole[:-20])
    with pytest.raises(tp.CorruptStoreError, match=re.escape(f"{first} line ") + ".*--keep-rejected --force"):
        load_report(str(out))
    first.unlink()
    with pytest.raises(tp.CorruptStoreError, match=re.escape(str(first)) + ": cannot read"):
        load_report(str(out))


def test_rejected_record_mutations_are_refused_or_read_as_written(tmp_path):
    good = json.dumps({"id": "f.jsonl:3", "step": "0:pii", "reason": "r", "text": "t", "metadata": {"k": [1]}})
    path = tmp_path / "r.jsonl"
    for label, data in mutations(good):
        path.write_bytes(data + b"\n")
        try:
            records = sample_rejected(str(tmp_path), ["r.jsonl"])
        except tp.TokenportError as exc:
            assert "r.jsonl line " in str(exc), label
            continue
        for record in records:  # a mutation that is still a record reads back as that record
            assert isinstance(record, RejectedRecord) and record.step and record.reason, label


def test_rejected_documents_with_a_nan_in_their_metadata_are_read(tmp_path):
    """The writer (json.dumps) writes a parquet row's missing float as NaN: the report reads that line."""
    with open(tmp_path / "r.jsonl", "w", encoding="utf-8") as handle:
        RejectedWriter(handle).sink_for("0:s")(Document("t", "f.parquet:0", {"score": float("nan")}), "why")
    (record,) = sample_rejected(str(tmp_path), ["r.jsonl"])
    assert (record.step, record.reason, record.metadata) == ("0:s", "why", {"score": None})


def test_nice_ticks_reach_the_top_in_round_steps():
    assert nice_ticks(187) == [0, 50, 100, 150, 200]
    assert nice_ticks(1.95) == [0, 0.5, 1.0, 1.5, 2.0]
    assert nice_ticks(0) == [0.0, 1.0] and nice_ticks(2, whole=True) == [0, 1, 2]
    assert _tick_labels(nice_ticks(0.014)) == ["0.000", "0.005", "0.010", "0.015"]
    assert nice_ticks(7) == [0, 2, 4, 6, 8]
