"""Tests of tokenport.tokenizers with real tokenizers trained here on the Python standard library."""

from __future__ import annotations

import ast
import base64
import inspect
import io
import json
import pathlib
import pickle
import sys
import sysconfig

import numpy as np
import pytest

from tests._support.bpe import train_byte_level_bpe
from tokenport.errors import ConfigError, TokenizerError
from tokenport.tokenizers import (
    TIKTOKEN_PATTERNS,
    ByteTokenizer,
    Tokenizer,
    load_tokenizer,
    tokenizer_from_identity,
)

UNICODE = [
    "héllo wörld — naïve café",
    "中文字符和日本語のテキスト、한국어",
    "emoji 😀👍🏽 👩‍👩‍👧‍👦 🇯🇵",
    "combining e\u0301 and RTL שלום مرحبا",
    "control \x00\x01 tabs\t\r\nand  spaces   ",
    "",
]


@pytest.fixture(scope="module")
def stdlib_texts() -> list[str]:
    """200 small-to-medium source files of the standard library, in a fixed order."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = [f for f in sorted(root.rglob("*.py")) if "-packages" not in str(f) and 1_000 < f.stat().st_size < 20_000]
    files = files[:: max(1, len(files) // 200)][:200]
    assert len(files) == 200
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory, stdlib_texts) -> str:
    """A byte-level BPE tokenizer.json (vocab 1000) trained on stdlib source."""
    pytest.importorskip("tokenizers")
    return train_byte_level_bpe(stdlib_texts[:80], 1000, str(tmp_path_factory.mktemp("bpe")))


def assert_same_ids(tok: Tokenizer, texts: list[str]) -> list[np.ndarray]:
    """encode_batch equals encode one by one, as 1-D int64 arrays within the vocabulary; returns them."""
    batch = tok.encode_batch(texts)
    assert len(batch) == len(texts)
    for text, ids in zip(texts, batch):
        single = tok.encode(text)
        assert single.dtype == np.int64 and single.ndim == 1
        assert ids.dtype == np.int64
        np.testing.assert_array_equal(ids, single)
        assert not single.size or (0 <= single.min() and single.max() < tok.vocab_size)
    return batch


def assert_pickles(tok: Tokenizer, text: str) -> None:
    """A pickled tokenizer carries its spec, not its vocabulary, and encodes the same after loading."""
    blob = pickle.dumps(tok)
    assert len(blob) < 1_000
    clone = pickle.loads(blob)
    assert "_backend" not in clone.__dict__  # loaded on first use
    np.testing.assert_array_equal(clone.encode(text), tok.encode(text))
    assert clone.identity() == tok.identity()


# ---------------------------------------------------------------- byte


def test_byte_round_trip(stdlib_texts):
    tok = load_tokenizer()
    texts = stdlib_texts[:50] + UNICODE
    for text, ids in zip(texts, assert_same_ids(tok, texts)):
        assert ids.max(initial=0) < 256
        assert bytes(ids.astype(np.uint8)) == text.encode("utf-8")
        assert tok.decode(ids) == text
        assert tok.decode(np.append(ids, tok.eod_id)) == text
    assert tok.decode([0xE4, 0xB8]) == "\ufffd"


def test_byte_encode_batch_edge_cases():
    tok = ByteTokenizer()
    assert tok.encode_batch([]) == []
    ascii_batch = ["a", "", "bc" * 100, "\n"]
    assert [ids.tolist() for ids in tok.encode_batch(ascii_batch)] == [list(t.encode()) for t in ascii_batch]
    assert_same_ids(tok, ascii_batch + UNICODE)


def test_byte_identity_and_pickle():
    tok = load_tokenizer("byte")
    assert (tok.kind, tok.vocab_size, tok.eod_id, tok.spec()) == ("byte", 257, 256, "byte")
    identity = json.loads(json.dumps(tok.identity()))
    assert identity == load_tokenizer(None).identity()
    assert load_tokenizer(identity["spec"]).identity() == identity
    assert tokenizer_from_identity(identity).identity() == identity
    assert load_tokenizer(tok) is tok
    assert_pickles(tok, UNICODE[2])


def test_decode_rejects_ids_outside_the_vocabulary():
    with pytest.raises(TokenizerError, match="257"):
        ByteTokenizer().decode([65, 300])


# ---------------------------------------------------------------- HF tokenizers


def test_hf_encode_decode(bpe_path, stdlib_texts):
    from tokenizers import Tokenizer as HF

    tok = load_tokenizer(f"hf:{bpe_path}")
    assert tok.kind == "hf" and tok.vocab_size == 1000
    assert tok.eod_id == HF.from_file(bpe_path).token_to_id("<|endoftext|>")
    texts = stdlib_texts[80:120] + UNICODE
    batch = assert_same_ids(tok, texts)
    reference = HF.from_file(bpe_path)
    for text, ids in zip(texts, batch):
        assert ids.tolist() == reference.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
    assert tok.decode(np.append(batch[0], tok.eod_id)) == texts[0]
    # the same tokenizer, named by the file or its directory
    for spec in (bpe_path, str(pathlib.Path(bpe_path).parent)):
        assert load_tokenizer(spec).identity()["fingerprint"] == tok.identity()["fingerprint"]


def test_hf_eod_override(bpe_path):
    from tokenizers import Tokenizer as HF

    token = HF.from_file(bpe_path).id_to_token(500)
    tok = load_tokenizer(f"hf:{bpe_path}#eod={token}")
    assert tok.eod_id == 500
    assert load_tokenizer(tok.spec()).eod_id == 500
    with pytest.raises(TokenizerError, match="no token 'not-a-token'"):
        load_tokenizer(f"hf:{bpe_path}#eod=not-a-token")


def test_hf_missing_eod(tmp_path):
    from tokenizers import Tokenizer as HF
    from tokenizers import models, pre_tokenizers, trainers

    hf = HF(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.train_from_iterator(["no special tokens here"] * 10, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    path = str(tmp_path / "tokenizer.json")
    hf.save(path)
    tok = load_tokenizer(path)  # loads (prepare --no-eod needs none); asking for its EOD id says what to do
    assert tok.eod_id_or_none is None
    with pytest.raises(TokenizerError, match="#eod=.*--no-eod") as err:
        _ = tok.eod_id
    assert path in str(err.value)
    assert load_tokenizer(f"{path}#eod=s").eod_id == hf.token_to_id("s")


def test_hf_pickle_and_identity(bpe_path, tmp_path):
    tok = load_tokenizer(f"hf:{bpe_path}")
    assert_pickles(tok, UNICODE[1])
    identity = tok.identity()
    assert json.loads(json.dumps(identity)) == identity
    assert tokenizer_from_identity(identity).identity() == identity

    copy = tmp_path / "tokenizer.json"
    copy.write_bytes(pathlib.Path(bpe_path).read_bytes())
    moved = load_tokenizer(str(copy)).identity()
    assert moved["fingerprint"] == identity["fingerprint"]
    copy.write_text(copy.read_text().replace('"<|endoftext|>"', '"<|endoftext2|>"', 1))
    assert tokenizer_from_identity(moved) is None  # changed file: not the recorded tokenizer
    copy.unlink()
    assert tokenizer_from_identity(moved) is None  # file gone


# ---------------------------------------------------------------- gigatoken


def test_gigatoken_matches_hf_on_stdlib(bpe_path, stdlib_texts):
    pytest.importorskip("gigatoken")
    hf = load_tokenizer(f"hf:{bpe_path}")
    gt = load_tokenizer(f"gigatoken:{bpe_path}")
    assert gt.kind == "gigatoken"
    assert (gt.vocab_size, gt.eod_id) == (hf.vocab_size, hf.eod_id)
    assert gt.identity()["fingerprint"] == hf.identity()["fingerprint"]
    texts = stdlib_texts + UNICODE + ["x<|endoftext|>y"]
    for text, a, b in zip(texts, hf.encode_batch(texts), gt.encode_batch(texts)):
        np.testing.assert_array_equal(a, b, err_msg=text[:80])
    assert_same_ids(gt, texts[:20] + UNICODE)
    assert gt.decode(gt.encode(UNICODE[2])) == UNICODE[2]
    assert gt.encode_batch([]) == []
    assert_pickles(gt, UNICODE[0])


def test_gigatoken_refuses_configs_it_would_mistokenize(bpe_path, tmp_path):
    pytest.importorskip("gigatoken")
    config = json.loads(pathlib.Path(bpe_path).read_text())
    config["pre_tokenizer"]["use_regex"] = False
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    with pytest.raises(TokenizerError, match="use_regex") as err:
        load_tokenizer(f"gigatoken:{path}")
    assert str(path) in str(err.value)
    assert load_tokenizer(f"hf:{path}").vocab_size == 1000  # HF still loads it

    config["normalizer"] = {"type": "NFKC"}
    config["pre_tokenizer"]["use_regex"] = True
    path.write_text(json.dumps(config))
    with pytest.raises(TokenizerError, match="gigatoken cannot load"):
        load_tokenizer(f"gigatoken:{path}")


@pytest.mark.parametrize(
    "post_processor",
    [
        None,
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        {"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False}]},
    ],
    ids=["none", "trim", "trim-keep-prefix-space", "sequence-no-trim"],
)
def test_gigatoken_offsets_derived_from_ids_equal_hf(bpe_path, stdlib_texts, tmp_path, post_processor):
    """Offsets from token byte lengths equal HF tokenizers' own, spaces trimmed as its post-processor trims."""
    pytest.importorskip("gigatoken")
    import random

    config = json.loads(pathlib.Path(bpe_path).read_text())
    config["added_tokens"].append(
        {
            "id": 1000,
            "content": "<|im_end|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    config["post_processor"] = post_processor
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config))
    hf, gt = load_tokenizer(f"hf:{path}"), load_tokenizer(f"gigatoken:{path}")
    rng = random.Random(0)
    alphabet = "ab Z  \n\t\u00e9\u4e2d\U0001f600\u0301 \u00a0" + "<|im_end|>"
    texts = [*UNICODE, " lead", "  two", "trail  ", "x <|im_end|> y", *(t[:400] for t in stdlib_texts[100:130])]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 50))) for _ in range(300)]
    for text in texts:
        ids, offsets = gt.encode_offsets(text)
        want_ids, want = hf.encode_offsets(text)
        assert ids.tolist() == want_ids.tolist(), text
        assert offsets.tolist() == want.tolist(), text
    assert_pickles(gt, UNICODE[0])


def test_derived_offsets_refuse_tokenizers_whose_ids_do_not_spell_the_text(bpe_path, tmp_path):
    pytest.importorskip("gigatoken")
    from tokenport._offsets import ByteLevelOffsets

    config = json.loads(pathlib.Path(bpe_path).read_text())
    gt = load_tokenizer(f"gigatoken:{bpe_path}")
    for change, reason in [
        (lambda c: c["pre_tokenizer"].update(add_prefix_space=True), "prefix space"),
        (lambda c: c.update(normalizer={"type": "NFC"}), "normalizer"),
        (lambda c: c["model"].update(continuing_subword_prefix="##"), "affixes"),
        (lambda c: c["added_tokens"][0].update(rstrip=True), "lstrip/rstrip"),
        (lambda c: c.update(pre_tokenizer={"type": "Whitespace"}), "no ByteLevel pre-tokenizer"),
    ]:
        edited = json.loads(json.dumps(config))
        change(edited)
        with pytest.raises(TokenizerError, match=reason) as err:
            ByteLevelOffsets(edited, gt)
        assert f"hf:{gt.path}" in str(err.value)
    offsets = ByteLevelOffsets(config, gt)
    ids = np.concatenate([gt.encode("x"), gt.encode("a")])
    with pytest.raises(TokenizerError, match="for text 1 spell 1 bytes of its 2"):
        offsets(["x", "ab", ""], ids, np.array([1, 1, 0]))  # ids that are not the texts' are caught
    with pytest.raises(TokenizerError, match="no entry"):
        offsets(["x"], np.array([1001]), np.array([1]))  # an id between the vocabulary and the added tokens
    assert offsets(["", ""], ids[:0], np.array([0, 0])).shape == (0, 2)


def test_offsets_batch_equals_one_by_one(bpe_path):
    """Every backend's batch gives each text's offsets counted from the text's own start."""
    texts = [*UNICODE, "a", "", "héllo wörld"]
    for spec in ["byte", f"hf:{bpe_path}", f"gigatoken:{bpe_path}"]:
        if spec.startswith("gigatoken"):
            pytest.importorskip("gigatoken")
        tok = load_tokenizer(spec)
        ids, lengths, offsets = tok.encode_offsets_batch(texts)
        assert ids.dtype == offsets.dtype == np.int64 and lengths.tolist() == [len(tok.encode(t)) for t in texts]
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        for k, text in enumerate(texts):
            want_ids, want = tok.encode_offsets(text)
            assert ids[bounds[k] : bounds[k + 1]].tolist() == want_ids.tolist()
            assert offsets[bounds[k] : bounds[k + 1]].tolist() == want.tolist()
        empty = tok.encode_offsets_batch([])
        assert [len(a) for a in empty] == [0, 0, 0]


# ---------------------------------------------------------------- tiktoken


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, in which byte-level BPE vocabularies are written."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}


@pytest.fixture(scope="module")
def ranks_path(bpe_path, tmp_path_factory) -> str:
    """A .tiktoken ranks file holding the trained BPE's tokens, ranked by id (merge order)."""
    to_byte = {c: b for b, c in _bytes_to_unicode().items()}
    vocab = json.loads(pathlib.Path(bpe_path).read_text())["model"]["vocab"]
    tokens = sorted((i, t) for t, i in vocab.items() if t != "<|endoftext|>")
    path = tmp_path_factory.mktemp("tiktoken") / "small.tiktoken"
    lines = (
        f"{base64.b64encode(bytes(to_byte[c] for c in t)).decode()} {rank}\n" for rank, (_, t) in enumerate(tokens)
    )
    path.write_text("".join(lines))
    return str(path)


def test_tiktoken_patterns_are_tiktokens():
    openai_public = pytest.importorskip("tiktoken_ext.openai_public")
    assert TIKTOKEN_PATTERNS["gpt2"] == openai_public.r50k_pat_str
    source = inspect.getsource(openai_public)
    assert TIKTOKEN_PATTERNS["cl100k"] in source
    assert TIKTOKEN_PATTERNS["o200k"].split("|")[0] in source


@pytest.mark.parametrize("pat", ["gpt2", "cl100k", "o200k"])
def test_tiktoken_matches_encoding(ranks_path, stdlib_texts, pat):
    tiktoken = pytest.importorskip("tiktoken")
    lines = pathlib.Path(ranks_path).read_text().splitlines()
    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in lines)}
    reference = tiktoken.Encoding(
        "ref", pat_str=TIKTOKEN_PATTERNS[pat], mergeable_ranks=ranks, special_tokens={"<|endoftext|>": len(ranks)}
    )

    tok = load_tokenizer(f"tiktoken:{ranks_path}#pat={pat}")
    assert (tok.kind, tok.vocab_size, tok.eod_id) == ("tiktoken", len(ranks) + 1, len(ranks))
    texts = stdlib_texts[120:150] + UNICODE + ["text with <|endoftext|> inside"]
    for text, ids in zip(texts, assert_same_ids(tok, texts)):
        assert ids.tolist() == reference.encode_ordinary(text)
        assert tok.decode(ids) == text
    assert load_tokenizer(tok.spec()).identity() == tok.identity()
    assert_pickles(tok, UNICODE[1])


def test_tiktoken_default_pattern_and_errors(ranks_path, tmp_path, monkeypatch):
    pytest.importorskip("tiktoken")
    assert load_tokenizer(ranks_path).spec().endswith("#pat=cl100k")
    with pytest.raises(ConfigError, match="unknown pattern 'p99'"):
        load_tokenizer(f"tiktoken:{ranks_path}#pat=p99")
    bad = tmp_path / "bad.tiktoken"
    for content, problem in [
        ("not base64!! x\n", "is not a tiktoken BPE ranks file"),
        ("YQ== 0\nYg== 0\n", "repeats a token or a rank"),
        ("YQ== 0\nYg== 1\n", "lacks 254 of the 256 single-byte tokens"),
    ]:
        bad.write_text(content)
        with pytest.raises(TokenizerError, match=f"{bad} {problem}"):
            load_tokenizer(f"tiktoken:{bad}")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    with pytest.raises(TokenizerError, match="'cl100k_base' is not in tiktoken's local cache"):
        load_tokenizer("tiktoken:cl100k_base")


# ---------------------------------------------------------------- sentencepiece


@pytest.fixture(scope="module")
def docstrings() -> list[str]:
    """Docstrings of the standard library's top-level modules."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(root.glob("*.py"))[:40]:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef)))]
        out += [d for d in map(ast.get_docstring, nodes) if d]
    return out


def _train_sentencepiece(lines: list[str], path: pathlib.Path, **options) -> str:
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=500,
        byte_fallback=True,
        add_dummy_prefix=False,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        minloglevel=2,
        **options,
    )
    path.write_bytes(model.getvalue())
    return str(path)


@pytest.fixture(scope="module")
def spm_path(docstrings, tmp_path_factory) -> str:
    return _train_sentencepiece(docstrings, tmp_path_factory.mktemp("spm") / "tiny.model")


def test_sentencepiece_round_trip(spm_path, docstrings):
    import sentencepiece

    reference = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    tok = load_tokenizer(spm_path)
    assert tok.kind == "sentencepiece"
    assert (tok.vocab_size, tok.eod_id) == (reference.get_piece_size(), reference.eos_id()) == (500, 2)
    texts = docstrings[:100] + UNICODE
    for text, ids in zip(texts, assert_same_ids(tok, texts)):
        assert ids.tolist() == reference.encode(text)
        assert tok.decode(np.append(ids, tok.eod_id)) == text
    assert load_tokenizer(f"sentencepiece:{spm_path}").spec() == tok.spec() == f"sentencepiece:{spm_path}"
    assert_pickles(tok, UNICODE[1])


def test_sentencepiece_without_eos(docstrings, tmp_path):
    path = _train_sentencepiece(docstrings[:300], tmp_path / "no-eos.model", eos_id=-1)
    with pytest.raises(TokenizerError, match="no eos piece") as err:
        load_tokenizer(f"sentencepiece:{path}")
    assert path in str(err.value)


# ---------------------------------------------------------------- bad specs


@pytest.mark.parametrize(
    "spec, error, named",
    [
        ("gpt2", TokenizerError, "tokenport downloads nothing"),
        ("nothing:here", ConfigError, "accepted forms"),
        ("wordpiece:vocab.txt", ConfigError, "accepted forms"),
        ("hf:{tmp}/missing/tokenizer.json", TokenizerError, "{tmp}/missing/tokenizer.json"),
        ("{tmp}/missing.json", TokenizerError, "{tmp}/missing.json"),
        ("gigatoken:{tmp}/missing.json", TokenizerError, "{tmp}/missing.json"),
        ("tiktoken:{tmp}/missing.tiktoken", TokenizerError, "{tmp}/missing.tiktoken"),
        ("tiktoken:not_an_encoding", TokenizerError, "'tiktoken:not_an_encoding' is not a built-in encoding"),
        ("sentencepiece:{tmp}/missing.model", TokenizerError, "{tmp}/missing.model"),
        ("{tmp}/missing.model", TokenizerError, "{tmp}/missing.model"),
        ("{tmp}", TokenizerError, "directory {tmp} holds no tokenizer.json"),
        ("{tmp}/notjson.json", TokenizerError, "{tmp}/notjson.json is not a valid HF tokenizer.json"),
        ("hf:{tmp}/notjson.json#pat=cl100k", ConfigError, "the only option is '#eod=...'"),
        ("sentencepiece:{tmp}/x.model#eod=</s>", ConfigError, "takes no '#' options"),
    ],
)
def test_bad_specs(spec, error, named, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hub-cache"))  # a model name is looked up there
    (tmp_path / "notjson.json").write_text("{ not json")
    with pytest.raises(error) as err:
        load_tokenizer(spec.format(tmp=tmp_path))
    assert named.format(tmp=tmp_path) in str(err.value)


def test_bad_spec_type():
    with pytest.raises(ConfigError, match="accepted forms"):
        load_tokenizer(123)


def test_missing_package_names_the_extra(spm_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # as if not installed
    with pytest.raises(TokenizerError, match=r"pip install 'tokenport\[sentencepiece\]'"):
        load_tokenizer(spm_path)


# ---------------------------------------------------------------- engine choice


def _variant(bpe_path: str, directory: pathlib.Path, name: str, change) -> str:
    """A copy of the tokenizer.json at `bpe_path`, changed by `change(config)`."""
    config = json.loads(pathlib.Path(bpe_path).read_text())
    change(config)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_choose_engine_runs_gigatoken_where_it_gives_hf_ids(bpe_path, stdlib_texts, caplog):
    pytest.importorskip("gigatoken")
    from tokenport.tokenizers import choose_engine

    hf = load_tokenizer(f"hf:{bpe_path}")
    with caplog.at_level("INFO", logger="tokenport.tokenizers"):
        chosen = choose_engine(hf, "auto", stdlib_texts[:5])
    assert chosen.kind == "gigatoken" and "with gigatoken" in caplog.text
    assert chosen.identity()["fingerprint"] == hf.identity()["fingerprint"]
    assert choose_engine(hf, "hf", stdlib_texts[:5]) is hf
    assert choose_engine(chosen, "hf", []).kind == "hf"  # a gigatoken spec, forced back to HF
    assert choose_engine(hf, "gigatoken", stdlib_texts[:5]).kind == "gigatoken"


@pytest.mark.parametrize(
    "name, change, why",
    [
        ("lowercase", lambda c: c.__setitem__("normalizer", {"type": "Lowercase"}), "Unsupported normalizer"),
        ("dropout", lambda c: c["model"].__setitem__("dropout", 1.0), "gives other ids than HF for sample text"),
    ],
)
def test_choose_engine_falls_back_to_hf_saying_why(bpe_path, stdlib_texts, tmp_path, caplog, name, change, why):
    """A normalizer gigatoken cannot load, or BPE dropout it ignores (other ids): HF runs, and a line says why;
    forcing gigatoken is refused."""
    pytest.importorskip("gigatoken")
    from tokenport.tokenizers import choose_engine

    hf = load_tokenizer(f"hf:{_variant(bpe_path, tmp_path, name, change)}")
    with caplog.at_level("INFO", logger="tokenport.tokenizers"):
        assert choose_engine(hf, "auto", stdlib_texts[:3]) is hf
    [line] = [r.getMessage() for r in caplog.records if "not gigatoken" in r.getMessage()]
    assert why in line and "\n" not in line
    with pytest.raises(TokenizerError, match="engine 'gigatoken' cannot run .*use engine 'hf'"):
        choose_engine(hf, "gigatoken", stdlib_texts[:3])


def test_choose_engine_refuses_an_engine_for_other_tokenizers():
    from tokenport.tokenizers import choose_engine

    byte = ByteTokenizer()
    assert choose_engine(byte, "auto", ["x"]) is byte
    with pytest.raises(ConfigError, match="engine 'gigatoken' applies to tokenizer.json tokenizers"):
        choose_engine(byte, "gigatoken", ["x"])
    with pytest.raises(ConfigError, match="engine 'fast' is not one of auto, hf, gigatoken"):
        choose_engine(byte, "fast", ["x"])
