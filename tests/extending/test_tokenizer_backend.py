"""A tokenizer backend added from outside tokenport: a toy defined here, registered with
`register_tokenizer`, prepares a corpus whose manifest names its spec; the store reads and decodes
back, and the CLI finds the same toy as an entry-point plugin in a fresh interpreter."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from tests._support.plugins import write_plugin
from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import ConfigError, TokenizerError
from tokenport.indexed import IndexedDataset
from tokenport.tokenizers import Tokenizer, load_tokenizer, register_tokenizer, tokenizer_from_identity

TOY = '''
"""A toy tokenizer backend: each UTF-8 byte is one id, shifted by an offset ("toy:OFFSET")."""

import numpy as np

from tokenport.tokenizers import Tokenizer, register_tokenizer


class OffsetBytes(Tokenizer):
    """UTF-8 bytes as ids offset..offset+255; eod is offset+256."""

    kind = "toy"

    def __init__(self, offset, name):
        self.offset = offset
        super().__init__(name)

    def _load(self):
        return None, 257 + self.offset, 256 + self.offset, f"toy offset {self.offset}"

    def spec(self):
        return self.name  # the spec it was loaded from: "toy:OFFSET"

    def encode(self, text):
        return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64) + self.offset

    def encode_batch(self, texts):
        return [self.encode(text) for text in texts]

    def _decode(self, ids):
        return (ids - self.offset).astype(np.uint8).tobytes().decode("utf-8", errors="replace")


def from_spec(spec):
    return OffsetBytes(int(spec.partition(":")[2]), spec)


register_tokenizer("toy", from_spec)
'''

TEXTS = ["hello world", "naïve café 東京", "third document\nwith two lines"]


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> str:
    """A directory holding the toy as module `toy_tokenizer_plugin`, declared as a tokenport plugin."""
    return write_plugin(tmp_path_factory.mktemp("plugin"), "toy_tokenizer_plugin", TOY, name="toy_tokenizer")


@pytest.fixture(scope="module")
def toy(plugin_dir):
    """The toy module, imported here (which registers it) from the plugin directory."""
    sys.path.insert(0, plugin_dir)
    try:
        yield importlib.import_module("toy_tokenizer_plugin")
    finally:
        sys.path.remove(plugin_dir)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS), encoding="utf-8")
    return path


def expected(offset: int) -> list[list[int]]:
    return [[b + offset for b in text.encode("utf-8")] + [256 + offset] for text in TEXTS]


def stored(parts) -> tuple[list[list[int]], dict]:
    documents, identity = [], {}
    for prefix in parts:
        with IndexedDataset(prefix) as ds:
            documents += [ds[i].tolist() for i in range(len(ds))]
            identity = ds.manifest.tokenizer
    return documents, identity


def test_a_registered_backend_prepares_and_its_store_decodes(toy, corpus, tmp_path):
    tokenizer = load_tokenizer("toy:3")
    assert isinstance(tokenizer, toy.OffsetBytes) and tokenizer.spec() == "toy:3"
    result = prepare(PrepareConfig(inputs=[str(corpus)], output=str(tmp_path / "out"), tokenizer="toy:3", workers=2))
    documents, identity = stored(result.parts)
    assert documents == expected(3)
    assert identity["spec"] == "toy:3" and identity["kind"] == "toy" and identity["eod_id"] == 259
    again = tokenizer_from_identity(identity)
    assert isinstance(again, toy.OffsetBytes)
    assert [again.decode(doc) for doc in documents] == TEXTS


def test_a_spec_naming_no_backend_is_refused_naming_it(toy):
    with pytest.raises(ConfigError, match=r"'nosuch:x'.*no tokenizer backend is called 'nosuch'"):
        load_tokenizer("nosuch:x")
    with pytest.raises(TokenizerError, match=r"'toy:three'.*ValueError"):  # the toy's own failure, named
        load_tokenizer("toy:three")


def test_registering_is_checked_and_a_factory_must_give_a_tokenizer(toy):
    register_tokenizer("toy", toy.from_spec)  # the same factory again: a no-op
    with pytest.raises(ConfigError, match="taken"):
        register_tokenizer("toy", lambda spec: toy.OffsetBytes(0, spec))
    with pytest.raises(ConfigError, match="not callable|expected a callable"):
        register_tokenizer("broken", "not a factory")  # type: ignore[arg-type]
    register_tokenizer("not_a_tokenizer", lambda spec: "text")
    with pytest.raises(ConfigError, match=r"'not_a_tokenizer:x'.*not a tokenport.tokenizers.Tokenizer"):
        load_tokenizer("not_a_tokenizer:x")
    assert issubclass(toy.OffsetBytes, Tokenizer)


def _cli(plugin_dir: str, *argv: str) -> subprocess.CompletedProcess:
    """`python -m tokenport ARGV` in a fresh interpreter that finds the toy only as a plugin."""
    path = os.pathsep.join([plugin_dir, *sys.path[1:]])
    return subprocess.run(
        [sys.executable, "-m", "tokenport", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


def test_the_cli_prepares_and_inspects_with_the_plugin_backend(plugin_dir, corpus, tmp_path):
    out = tmp_path / "out"
    done = _cli(plugin_dir, "prepare", str(corpus), "-o", str(out), "--tokenizer", "toy:5", "--workers", "2", "-q")
    assert done.returncode == 0, done.stderr
    parts = sorted(str(p.with_suffix("")) for p in out.glob("part-*.idx"))
    documents, identity = stored(parts)
    assert documents == expected(5) and identity["spec"] == "toy:5"
    shown = _cli(plugin_dir, "inspect", *parts, "--json")
    assert shown.returncode == 0, shown.stderr
    previews = [text for store in json.loads(shown.stdout)["stores"] for text in store["first_documents"]]
    assert previews[:1] == [TEXTS[0]]


def test_a_backend_registered_here_only_reaches_the_worker_processes(toy, corpus, tmp_path):
    private = tmp_path / "private"  # importable by the workers (they get this sys.path), but no plugin
    private.mkdir()
    (private / "toy_tokenizer_private.py").write_text(
        "from tokenport.tokenizers import register_tokenizer\n"
        "from toy_tokenizer_plugin import OffsetBytes\n\n\n"
        "def from_spec(spec):\n"
        "    return OffsetBytes(int(spec.partition(':')[2]), spec)\n\n\n"
        "register_tokenizer('toy_private', from_spec)\n"
    )
    sys.path.insert(0, str(private))
    try:
        importlib.import_module("toy_tokenizer_private")
        config = PrepareConfig(inputs=[str(corpus)], output=str(tmp_path / "out"), tokenizer="toy_private:7", workers=3)
        documents, identity = stored(prepare(config).parts)
    finally:
        sys.path.remove(str(private))
    assert documents == expected(7) and identity["kind"] == "toy"


def test_a_factory_workers_cannot_import_is_refused_before_any_work(toy, corpus, tmp_path):
    register_tokenizer("toy_local", lambda spec: toy.OffsetBytes(1, spec))
    config = PrepareConfig(inputs=[str(corpus)], output=str(tmp_path / "out"), tokenizer="toy_local:1", workers=2)
    with pytest.raises(ConfigError, match=r"'toy_local:1'.*cannot be sent to worker processes"):
        prepare(config)
    assert not (tmp_path / "out").exists()


def test_register_tokenizer_against_a_shadow_model():
    """Random register calls, compared after each with a dict: a refused call changes nothing."""
    import random

    from tokenport.tokenizers.base import TOKENIZERS

    rng = random.Random(27)
    factories = [lambda spec, k=k: ByteTokenizerLike(k, spec) for k in range(3)]
    names = [f"shadow_{k}" for k in range(4)] + ["", "no spaces", "hf"]
    model = dict(TOKENIZERS.items())
    for _ in range(200):
        name, factory = rng.choice(names), rng.choice([*factories, "not callable", None])
        valid_name = bool(name) and name.replace("_", "").isalnum()
        allowed = valid_name and callable(factory) and model.get(name, factory) is factory
        if allowed:
            register_tokenizer(name, factory)  # type: ignore[arg-type]
            model[name] = factory
        else:
            with pytest.raises(ConfigError):
                register_tokenizer(name, factory)  # type: ignore[arg-type]
        assert dict(TOKENIZERS.items()) == model


class ByteTokenizerLike(Tokenizer):
    """A stand-in tokenizer for the shadow test (never loaded there)."""

    kind = "shadow"

    def __init__(self, k: int, name: str) -> None:
        self.k = k
        super().__init__(name)

    def _load(self):
        return None, 257, 256, "shadow"

    def spec(self):
        return self.name

    def encode(self, text):
        raise NotImplementedError

    def encode_batch(self, texts):
        raise NotImplementedError

    def _decode(self, ids):
        raise NotImplementedError


def test_a_ray_task_registers_the_backend_its_driver_added(toy):
    from tokenport.corpus.run.ray_executor import _tokenizer

    tokenizer = _tokenizer("toy_ray:2", (("toy_ray", toy.from_spec),))  # what a task gets with its unit
    assert isinstance(tokenizer, toy.OffsetBytes) and tokenizer.encode("a").tolist() == [ord("a") + 2]
