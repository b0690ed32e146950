"""Cleaning steps inside `prepare`: specs checked up front, counters per step, output and resume."""

from __future__ import annotations

import json
import pathlib

import pytest

import tokenport as tp
from tokenport.corpus import PrepareConfig, prepare
from tokenport.indexed import IndexedDataset

TEXTS = [
    "Write to jane.roe@example.org about the meeting.",
    "No personal data in this one.",
    "Call 555-123-4567 or mail bob@example.com, card 4111 1111 1111 1111.",
]


def corpus(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    return str(path)


def decoded(result) -> list[str]:
    byte = tp.load_tokenizer("byte")
    out = []
    for prefix in result.parts:
        with IndexedDataset(prefix) as ds:
            out += [byte.decode([t for t in ds[i].tolist() if t != byte.eod_id]) for i in range(len(ds))]
    return out


def test_pii_step_scrubs_the_output_and_reports_counts(tmp_path):
    steps = [{"step": "pii", "kinds": ["email", "phone"]}]
    result = prepare(PrepareConfig([corpus(tmp_path)], str(tmp_path / "out"), workers=1, steps=steps))
    assert decoded(result) == [
        "Write to <EMAIL> about the meeting.",
        "No personal data in this one.",
        "Call <PHONE_NUMBER> or mail <EMAIL>, card 4111 1111 1111 1111.",
    ]
    assert result.steps == {"0:pii": {"documents_in": 3, "documents_out": 3, "replaced:email": 2, "replaced:phone": 1}}
    assert "step 0:pii: 3 documents in, 3 out; replaced:email 2, replaced:phone 1" in result.summary()
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    assert manifest["steps"] == result.steps and manifest["config"]["steps"] == steps
    again = prepare(PrepareConfig([corpus(tmp_path)], str(tmp_path / "out"), workers=1, steps=steps))
    assert again.steps == result.steps and again.resumed_units == again.units  # finished: nothing rerun


def test_other_steps_mean_another_output(tmp_path):
    prepare(PrepareConfig([corpus(tmp_path)], str(tmp_path / "out"), workers=1))
    with pytest.raises(tp.ConfigError):
        prepare(PrepareConfig([corpus(tmp_path)], str(tmp_path / "out"), workers=1, steps=[{"step": "pii"}]))


@pytest.mark.parametrize(
    "steps, match",
    [
        ([{"kinds": ["email"]}], r"steps\[0\]: expected a mapping with a 'step' key"),
        ([{"step": "pii"}, {"step": "magic"}], r"steps\[1\]: unknown step 'magic'"),
        ([{"step": "pii", "kinds": ["ssn"]}], r"steps\[0\] \(pii\): PII kind 'ssn' is unknown"),
        ([{"step": "pii", "colour": "red"}], r"steps\[0\] \(pii\): .*colour"),
        ({"step": "pii"}, "expected a list of step specs"),
    ],
)
def test_bad_step_specs_are_refused_before_any_work(tmp_path, steps, match):
    with pytest.raises(tp.ConfigError, match=match):
        PrepareConfig([corpus(tmp_path)], str(tmp_path / "out"), steps=steps)
    assert not (tmp_path / "out").exists()


def test_cli_reads_steps_from_a_file(tmp_path, capsys):
    from tokenport.cli import main

    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps({"steps": [{"step": "pii", "kinds": ["email"]}]}))
    assert (
        main(["prepare", corpus(tmp_path), "-o", str(tmp_path / "out"), "--steps", str(steps), "-q", "--workers", "1"])
        == 0
    )
    assert "step 0:pii: 3 documents in, 3 out; replaced:email 2" in capsys.readouterr().out


def test_quality_steps_drop_documents_and_count_reasons(tmp_path):
    steps = [{"step": "gopher_quality", "min_words": 6}, {"step": "gopher_repetition"}, {"step": "pii"}]
    result = prepare(PrepareConfig([corpus(tmp_path)], str(tmp_path / "out"), workers=1, steps=steps))
    assert decoded(result) == ["Write to <EMAIL> about the meeting."]
    assert result.steps["0:gopher_quality"] == {
        "documents_in": 3,
        "documents_out": 1,
        "removed:few_alphabetic_words": 1,
        "removed:few_stop_words": 1,
    }
    assert result.steps["1:gopher_repetition"] == {"documents_in": 1, "documents_out": 1}
    assert result.steps["2:pii"] == {"documents_in": 1, "documents_out": 1, "replaced:email": 1}
    assert result.documents == 1
    with pytest.raises(tp.ConfigError, match=r"steps\[0\] \(gopher_quality\): min_words=-3"):
        PrepareConfig([corpus(tmp_path)], str(tmp_path / "x"), steps=[{"step": "gopher_quality", "min_words": -3}])


def _dedup_corpus(tmp_path: pathlib.Path) -> list[str]:
    base = [f"Paragraph {i}: " + " ".join(f"word{i}x{j}" for j in range(60)) for i in range(6)]
    near = base[2].replace("word2x30", "changed").replace("word2x31", "words")  # one small edit
    files = {
        "a.jsonl": [base[0], base[1], base[2]],
        "b.jsonl": [base[3], base[0].upper(), near],  # an exact duplicate (case aside) and a near one
        "c.jsonl": [base[4], base[5], base[1] + "  "],
    }
    paths = []
    for name, texts in files.items():
        path = tmp_path / name
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        paths.append(str(path))
    return paths


def test_exact_and_minhash_dedup_across_units_keep_first_occurrences(tmp_path):
    inputs = _dedup_corpus(tmp_path)
    steps = [{"step": "exact_dedup"}, {"step": "minhash_dedup"}]
    results = [
        prepare(PrepareConfig(inputs, str(tmp_path / f"out{w}"), workers=w, steps=steps, unit_bytes=100))
        for w in (1, 2)
    ]
    for result in results:
        texts = decoded(result)
        assert len(texts) == 6 and [t.split(":")[0] for t in texts] == [f"Paragraph {i}" for i in (0, 1, 2, 3, 4, 5)]
        assert result.steps["0:exact_dedup"] == {"documents_in": 9, "documents_out": 7, "removed:duplicate": 2}
        assert result.steps["1:minhash_dedup"] == {"documents_in": 7, "documents_out": 6, "removed:duplicate": 1}
    assert decoded(results[0]) == decoded(results[1])  # whatever the worker count


def test_an_interrupted_dedup_resumes_without_redoing_its_passes(tmp_path, monkeypatch):
    import importlib

    pipeline = importlib.import_module("tokenport.corpus.run.pipeline")  # tp.prepare is the function
    worker = importlib.import_module("tokenport.corpus.run.worker")

    inputs = _dedup_corpus(tmp_path)
    steps = [{"step": "minhash_dedup", "bands": 10, "rows": 5}]
    expected = decoded(prepare(PrepareConfig(inputs, str(tmp_path / "clean"), workers=1, steps=steps, unit_bytes=100)))

    def stop(*args, **kwargs):
        raise KeyboardInterrupt  # the run dies after its dedup passes, before tokenizing

    monkeypatch.setattr(pipeline, "_run", stop)
    config = PrepareConfig(inputs, str(tmp_path / "out"), workers=1, steps=steps, unit_bytes=100)
    with pytest.raises(KeyboardInterrupt):
        prepare(config)
    dedup_dir = tmp_path / "out" / ".work" / "dedup-0"
    assert len(list(dedup_dir.glob("*.drop.npy"))) == len(list(dedup_dir.glob("*.keys.npy"))) > 1
    monkeypatch.undo()
    signed = []
    real_sign = worker.sign_unit
    monkeypatch.setattr(worker, "sign_unit", lambda *a, **k: signed.append(1) or real_sign(*a, **k))
    assert decoded(prepare(config)) == expected
    assert signed == []  # keys and decisions were reused
    with pytest.raises(tp.ConfigError, match=r"steps\[0\] \(minhash_dedup\): unexpected option 'band'"):
        PrepareConfig(inputs, str(tmp_path / "x"), steps=[{"step": "minhash_dedup", "band": 3}])


def test_rejected_documents_are_kept_for_audit_with_step_and_reason(tmp_path):
    from tokenport.cli import main

    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps([{"step": "gopher_quality", "min_words": 6}, {"step": "pii"}]))
    out = tmp_path / "out"
    assert (
        main(
            [
                "prepare",
                corpus(tmp_path),
                "-o",
                str(out),
                "--steps",
                str(steps),
                "--keep-rejected",
                "-q",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "tokenport.json").read_text())
    records = [json.loads(line) for name in manifest["rejected"] for line in (out / name).read_text().splitlines()]
    assert sorted((r["step"], r["reason"], r["text"]) for r in records) == sorted(
        [
            ("0:gopher_quality", "few_stop_words", TEXTS[1]),
            ("0:gopher_quality", "few_alphabetic_words", TEXTS[2]),
        ]
    )
    assert all(r["id"].startswith(corpus(tmp_path)) for r in records)
    assert not (out / ".work").exists()


def test_report_renders_text_and_html(tmp_path, capsys):
    from tokenport.cli import main

    steps = [{"step": "gopher_quality", "min_words": 6}, {"step": "pii"}]
    prepare(PrepareConfig([corpus(tmp_path)], str(tmp_path / "out"), workers=1, steps=steps))
    page = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "out"), "--html", str(page)]) == 0
    text = capsys.readouterr().out
    assert "1 documents" in text and "0:gopher_quality" in text and "removed:few_stop_words 1" in text
    assert "tokens per document: mean" in text
    body = page.read_text()
    assert body.startswith("<!doctype html>") and "<svg" in body and "0:gopher_quality · few_alphabetic_words" in body
    assert main(["report", str(tmp_path)]) != 0
    assert "no tokenport.json here" in capsys.readouterr().err


def test_report_html_is_refused_cleanly_and_published_whole(tmp_path, capsys):
    """--html '' used to be ignored (exit 0, no page); a page was written in place (a kill or a full
    disk left half of one)."""
    import os
    import subprocess
    import sys

    from tokenport.cli import main
    from tokenport.corpus.run.state import KILL_AT

    out = tmp_path / "out"
    prepare(PrepareConfig([corpus(tmp_path)], str(out), workers=1))
    capsys.readouterr()
    (tmp_path / "adir").mkdir()
    for bad in ("", str(tmp_path / "adir"), str(tmp_path / "missing" / "r.html")):
        before = sorted(tmp_path.rglob("*"))
        assert main(["report", str(out), "--html", bad]) != 0
        err = capsys.readouterr().err
        assert err.startswith("tokenport: ") and "html" in err.lower() and "Traceback" not in err
        assert sorted(tmp_path.rglob("*")) == before
    page = tmp_path / "r.html"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for kill, published in (("1", False), ("2", True)):  # just before the rename, and just after it
        command = [sys.executable, "-m", "tokenport", "-q", "report", str(out), "--html", str(page)]
        assert subprocess.run(command, env={**env, KILL_AT: kill}, capture_output=True).returncode == 137
        assert page.exists() == published
    whole = page.read_text()
    assert main(["report", str(out), "--html", str(page)]) == 0
    assert page.read_text() == whole and whole.startswith("<!doctype html>")
    assert [p.name for p in tmp_path.glob("r.html*")] == ["r.html"]  # the killed run's temporary is gone


def test_cross_dataset_dedup_against_a_saved_index(tmp_path):
    inputs = _dedup_corpus(tmp_path)
    index = str(tmp_path / "indexes" / "web")
    first = prepare(
        PrepareConfig(
            inputs[:1], str(tmp_path / "first"), workers=1, steps=[{"step": "minhash_dedup", "save_index": index}]
        )
    )
    assert decoded(first)[0].startswith("Paragraph 0")
    second = prepare(
        PrepareConfig(
            inputs[1:], str(tmp_path / "second"), workers=1, steps=[{"step": "minhash_dedup", "index": index}]
        )
    )
    # b.jsonl repeats paragraph 0 (upper-cased) and nearly repeats paragraph 2, both in a.jsonl; c.jsonl
    # repeats paragraph 1: all three go, against the first run's index.
    assert [t.split(":")[0] for t in decoded(second)] == ["Paragraph 3", "Paragraph 4", "Paragraph 5"]
    with pytest.raises(tp.ConfigError, match="was made with .* this step uses"):
        PrepareConfig(inputs, str(tmp_path / "x"), steps=[{"step": "minhash_dedup", "bands": 10, "index": index}])
    with pytest.raises(tp.ConfigError, match="cannot be read"):
        PrepareConfig(inputs, str(tmp_path / "x"), steps=[{"step": "exact_dedup", "index": str(tmp_path / "none")}])
