"""compat='datatrove' reads spaCy's English tables from tokenport's snapshot, not from spaCy, when
the snapshot was taken from the installed spaCy: the same tables, without spaCy's import (which
imports thinc and torch)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tokenport.corpus.steps import spacy_words
from tokenport.corpus.steps.spacy_words import EnglishWords, spacy_rules, spacy_rules_of_spacy

pytest.importorskip("spacy")

TEXT = 'Don\'t stop: e-mail me at a.b@example.com (or see https://example.com/x?y=1)... U.S. 3.5% "ok"!'


def test_the_snapshot_is_the_installed_spacys_tables():
    if spacy_rules().spacy != importlib.metadata.version("spacy"):
        pytest.skip("the snapshot was taken from another spaCy version")
    assert spacy_rules() == spacy_rules_of_spacy()


def test_compat_words_load_without_importing_spacy():
    code = (
        "import sys; from tokenport.corpus.steps.spacy_words import english_words; english_words()('a b'); "
        "assert 'spacy' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_snapshot_of_another_spacy_version_is_not_used(tmp_path, monkeypatch):
    data = spacy_words._SNAPSHOT
    other = tmp_path / "rules.json"
    other.write_bytes(open(data, "rb").read().replace(b'"spacy":"', b'"spacy":"0.0.'))
    monkeypatch.setattr(spacy_words, "_SNAPSHOT", str(other))
    rules = spacy_rules()
    assert rules.spacy == importlib.metadata.version("spacy")
    assert EnglishWords(rules)(TEXT) == EnglishWords(spacy_rules_of_spacy())(TEXT)


def test_every_mutation_of_the_snapshot_is_refused_or_read(tmp_path, monkeypatch):
    path = tmp_path / "rules.json"
    good = open(spacy_words._SNAPSHOT, "rb").read()
    monkeypatch.setattr(spacy_words, "_SNAPSHOT", str(path))
    monkeypatch.setattr(spacy_words, "spacy_rules_of_spacy", lambda: "spaCy's own")
    for label, data in mutations(good, limit=40):
        path.write_bytes(data)
        try:
            rules = spacy_rules()
        except tp.ConfigError as error:
            assert str(path) in str(error), label
        else:  # a valid document: used when of this spaCy version, else spaCy's own tables are
            assert rules == "spaCy's own" or isinstance(rules, spacy_words.SpacyRules), label
