"""Language identification on real multilingual text (the standard library's CJK test files)."""

from __future__ import annotations

import os
import sysconfig

import pytest

import tokenport as tp
from tokenport.corpus import Document

pytest.importorskip("pycld2")
from tokenport.corpus.steps.language import LanguageFilter, detect_language  # noqa: E402

CJK = os.path.join(sysconfig.get_paths()["stdlib"], "test", "cjkencodings")

SENTENCES = {
    "en": "The town council approved the budget for the new library after a long debate on Tuesday evening.",
    "fr": "Le conseil municipal a approuvé le budget de la nouvelle bibliothèque après un long débat mardi soir.",
    "de": "Der Stadtrat hat am Dienstagabend nach langer Debatte den Haushalt für die neue Bibliothek genehmigt.",
    "es": "El ayuntamiento aprobó el presupuesto de la nueva biblioteca tras un largo debate el martes por la noche.",
    "ru": "Городской совет утвердил бюджет новой библиотеки после долгих дебатов во вторник вечером.",
}


@pytest.mark.parametrize("code, text", sorted(SENTENCES.items()))
def test_european_languages(code, text):
    assert detect_language(text)[0] == code


@pytest.mark.parametrize(
    "name, code",
    [("gb2312-utf8.txt", "zh"), ("big5-utf8.txt", "zh-Hant"), ("euc_jp-utf8.txt", "ja"), ("euc_kr-utf8.txt", "ko")],
)
def test_real_chinese_japanese_and_korean_text(name, code):
    path = os.path.join(CJK, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not installed")
    detected, score = detect_language(open(path, encoding="utf-8").read())
    assert detected == code and score > 0.5


def test_the_step_keeps_chosen_languages_and_records_them():
    step = LanguageFilter(languages=["en", "zh"], min_score=0.5)
    docs = [
        Document(SENTENCES["en"], "en"),
        Document(SENTENCES["fr"], "fr"),
        Document("我们今天去北京参观故宫博物院，天气很好。", "zh"),
        Document("12345 67890", "digits"),
        Document("\x00\x01 control characters do not break it " * 5, "ctl"),
    ]
    kept = list(step(docs))
    assert [d.id for d in kept] == ["en", "zh", "ctl"]
    assert kept[0].metadata["language"] == "en" and 0.5 <= kept[0].metadata["language_score"] <= 1
    assert step.counts() == {"removed:other_language": 2, "kept:en": 2, "kept:zh": 1}
    with pytest.raises(tp.ConfigError, match="min_score=2"):
        LanguageFilter(min_score=2)


def test_a_language_ranked_after_unknown_is_read():
    # CLD2 answers (('Unknown', 'un', 1), ('RUSSIAN', 'ru', 32), ('Unknown', 'un', 0)) on this text.
    text = (
        "😀 😀 😀 во вечером. for 🙂 😀 for 👍 библиотеки 👍 😀 🙂 дебатов новой дебатов 😀 🙂 😀 😀 council "
        "Городской 🙂 вторник 😀 утвердил"
    )
    assert detect_language(text) == ("ru", 0.32)
    assert detect_language("12345 67890") == ("un", 0.0)
