"""Decontamination: documents sharing a 13-word passage with an evaluation set are dropped."""

from __future__ import annotations

import json

import pytest

import tokenport as tp
from tokenport.corpus import Document
from tokenport.corpus.steps.decontaminate import Decontaminate

QUESTION = (
    "Which element has the chemical symbol Au and has been prized by people across the world for thousands of years?"
)


@pytest.fixture
def eval_set(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps({"text": QUESTION}) + "\n" + json.dumps({"text": "Short one."}) + "\n")
    return str(path)


def test_a_shared_13_word_passage_is_contamination_case_and_punctuation_aside(eval_set):
    step = Decontaminate([eval_set])
    leaked = "Quiz night! WHICH ELEMENT has the chemical symbol Au, and has been prized by people across the world."
    near = "Which element has the chemical symbol Au and has been valued by people across the world for ages."
    clean = "Gold is a soft metal used in jewellery."
    kept = list(step([Document(leaked, "a"), Document(near, "b"), Document(clean, "c")]))
    assert [d.id for d in kept] == ["b", "c"]  # 12 shared words in a row is not 13
    assert step.counts() == {"removed:contaminated": 1}
    assert [d.id for d in Decontaminate([eval_set], n=8)([Document(near, "b")])] == []


def test_text_files_and_bad_evaluation_sets(tmp_path, eval_set):
    plain = tmp_path / "eval.txt"
    plain.write_text(QUESTION)
    assert list(Decontaminate([str(plain)])([Document(QUESTION.upper(), "x")])) == []
    with pytest.raises(tp.ConfigError, match="evaluation set file not found"):
        Decontaminate([str(tmp_path / "missing.jsonl")])
    with pytest.raises(tp.ConfigError, match="hold no 13-word passage"):
        short = tmp_path / "short.txt"
        short.write_text("too short to matter")
        Decontaminate([str(short)])
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "no text field"}\n')
    with pytest.raises(tp.InputDataError, match="broken.jsonl:1: not a JSON object with a 'text' field"):
        Decontaminate([str(broken)])
    with pytest.raises(tp.ConfigError, match="eval_files"):
        Decontaminate(eval_set)  # a string, not a list
