"""`prepare` with an ``hf:`` tokenizer: gigatoken by default where it reproduces HF's ids on the input,
HF tokenizers otherwise (saying why), either forced by ``tokenizer_engine``; the same bytes either way."""

from __future__ import annotations

import json
import pathlib
import sysconfig

import pytest

from tests._support.bpe import train_byte_level_bpe
from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import ConfigError, TokenizerError

pytest.importorskip("gigatoken")

STDLIB = pathlib.Path(sysconfig.get_paths()["stdlib"])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[pathlib.Path, str, str]:
    """A jsonl of stdlib sources, a byte-level BPE trained on them, and a copy of it with a normalizer."""
    root = tmp_path_factory.mktemp("engine")
    texts = [p.read_text(encoding="utf-8") for p in sorted(STDLIB.glob("*.py"))[:40]]
    path = root / "in.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    bpe = train_byte_level_bpe(texts[:20], 1200, str(root))
    config = json.loads(pathlib.Path(bpe).read_text())
    config["normalizer"] = {"type": "NFKC"}  # HF tokenizers applies it; gigatoken cannot load it
    normalized = root / "nfkc.json"
    normalized.write_text(json.dumps(config))
    return path, bpe, str(normalized)


def _store_files(result) -> list[bytes]:
    return [pathlib.Path(p + suffix).read_bytes() for p in result.parts for suffix in (".bin", ".idx")]


def _run(corpus, tmp_path, name: str, tokenizer: str, engine: str):
    return prepare(
        PrepareConfig([str(corpus[0])], str(tmp_path / name), tokenizer=tokenizer, tokenizer_engine=engine, workers=2)
    )


def test_gigatoken_by_default_with_the_bytes_of_hf(corpus, tmp_path, caplog):
    with caplog.at_level("INFO", logger="tokenport.tokenizers"):
        fast = _run(corpus, tmp_path, "auto", f"hf:{corpus[1]}", "auto")
    assert "with gigatoken" in caplog.text
    forced = _run(corpus, tmp_path, "hf", f"hf:{corpus[1]}", "hf")
    assert fast.documents == forced.documents == 40
    assert _store_files(fast) == _store_files(forced)
    manifests = [json.loads((tmp_path / name / "tokenport.json").read_text()) for name in ("auto", "hf")]
    assert manifests[0]["tokenizer"] == manifests[1]["tokenizer"] and manifests[0]["tokenizer"]["kind"] == "hf"
    assert manifests[0]["fingerprint"] == manifests[1]["fingerprint"]  # the engine is how, not what


def test_a_tokenizer_gigatoken_cannot_run_falls_back_to_hf(corpus, tmp_path, caplog):
    with caplog.at_level("INFO", logger="tokenport.tokenizers"):
        fallback = _run(corpus, tmp_path, "auto", f"hf:{corpus[2]}", "auto")
    [line] = [r.getMessage() for r in caplog.records if "not gigatoken" in r.getMessage()]
    assert "Unsupported normalizer type: NFKC" in line
    assert _store_files(fallback) == _store_files(_run(corpus, tmp_path, "hf", f"hf:{corpus[2]}", "hf"))
    with pytest.raises(TokenizerError, match="engine 'gigatoken' cannot run"):
        _run(corpus, tmp_path, "forced", f"hf:{corpus[2]}", "gigatoken")


def test_an_unknown_engine_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"tokenizer_engine='rust' \(--tokenizer-engine\): must be one of auto, hf"):
        PrepareConfig(["x.jsonl"], str(tmp_path / "o"), tokenizer_engine="rust")
