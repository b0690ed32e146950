"""Every failed optional import names its pip extra, before any work is done.

Each case hides one optional package (``sys.modules[name] = None``: its import fails as if it were not
installed), starts the feature that needs it, and expects a TokenportError naming
``pip install 'tokenport[EXTRA]'``, with nothing written and no state changed. Every extra any message
names exists in pyproject.toml.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import tomllib

import tokenport as tp
from tokenport import metrics
from tokenport.errors import TokenportError

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tokenport"


def extras() -> set[str]:
    """The optional-dependency extras pyproject.toml declares."""
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A small store written with the checksums this environment picks (xxh3-64: xxhash is installed)."""
    work = tmp_path_factory.mktemp("optional")
    data = write_jsonl(work / "docs.jsonl", [f"document {i} " * 20 for i in range(30)])
    result = tp.prepare(tp.PrepareConfig(inputs=(str(data),), output=str(work / "store"), workers=1))
    assert json.loads(Path(result.parts[0] + ".json").read_text())["checksums"]["algorithm"] == "xxh3-64"
    return result.parts[0]


def fresh_import(monkeypatch, module: str) -> Callable[[], object]:
    """Importing `module` afresh (its cached copy set aside for the test)."""
    monkeypatch.delitem(sys.modules, module, raising=False)
    return lambda: importlib.import_module(module)


def prepare_into(tmp_path: Path, inputs: Path, **options) -> Callable[[], object]:
    return lambda: tp.prepare(
        tp.PrepareConfig(inputs=(str(inputs),), output=str(tmp_path / "out"), workers=1, **options)
    )


def zstd_input(tmp_path: Path) -> Path:
    import zstandard

    path = tmp_path / "docs.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "hello"}\n'))
    return path


def parquet_input(tmp_path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": ["hello", "world"]}), path)
    return path


def yaml_spec(tmp_path: Path, store: str) -> Callable[[], object]:
    path = tmp_path / "spec.yaml"
    path.write_text(f"blend:\n  - weight: 1\n    path: {store}\n")
    return lambda: tp.load_blend_spec(path)


def hf_tokenizer(tmp_path: Path) -> Callable[[], object]:
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    return lambda: tp.load_tokenizer(f"hf:{path}").eod_id


def chat_template(tmp_path: Path) -> Callable[[], object]:
    from tokenport.chat import load_chat_template

    path = tmp_path / "template.jinja"
    path.write_text("{{ messages }}")
    return lambda: load_chat_template(str(path))


def first_batch(store: str) -> Callable[[], object]:
    dataset = tp.PackedDataset(tp.IndexedDataset(store), 64, too_long="split", seed=0)
    loader = tp.StatefulLoader(dataset, tp.PretrainingSampler(len(dataset), 0, 2, 0, 1))
    return lambda: next(iter(loader))


# (case, hidden module, extra, the feature started: a function of (tmp_path, store, monkeypatch))
CASES = [
    ("metrics.enable", "prometheus_client", "metrics", lambda tmp, store, mp: metrics.enable),
    ("metrics.serve", "prometheus_client", "metrics", lambda tmp, store, mp: lambda: metrics.serve(0)),
    ("yaml spec", "yaml", "yaml", lambda tmp, store, mp: yaml_spec(tmp, store)),
    ("xxh3 checksums", "xxhash", "fast", lambda tmp, store, mp: lambda: tp.verify(store)),
    ("zstd input", "zstandard", "fast", lambda tmp, store, mp: prepare_into(tmp, zstd_input(tmp))),
    ("parquet input", "pyarrow", "parquet", lambda tmp, store, mp: prepare_into(tmp, parquet_input(tmp))),
    (
        "language step",
        "pycld2",
        "lang",
        lambda tmp, store, mp: prepare_into(tmp, write_jsonl(tmp / "d.jsonl", ["hi"]), steps=[{"step": "language"}]),
    ),
    ("hf tokenizer", "tokenizers", "hf", lambda tmp, store, mp: hf_tokenizer(tmp)),
    ("chat template", "jinja2", "chat", lambda tmp, store, mp: chat_template(tmp)),
    ("torch loader", "torch", "torch", lambda tmp, store, mp: first_batch(store)),
    (
        "grain",
        "grain",
        "grain",
        lambda tmp, store, mp: lambda: __import__("tokenport.integrations.grain").integrations.grain.grain_dataset([]),
    ),
    ("HF Trainer", "transformers", "trainer", lambda tmp, store, mp: fresh_import(mp, "tokenport.integrations.hf")),
    ("Ray dock", "ray", "ray", lambda tmp, store, mp: fresh_import(mp, "tokenport.dock.ray")),
    (
        "Ray executor",
        "ray",
        "ray",
        lambda tmp, store, mp: prepare_into(tmp, write_jsonl(tmp / "d.jsonl", ["hi"]), executor="ray"),
    ),
]


@pytest.mark.parametrize(("case", "module", "extra", "feature"), CASES, ids=[case[0] for case in CASES])
def test_a_missing_optional_package_names_its_extra_before_any_work(
    case, module, extra, feature, store, tmp_path, monkeypatch
):
    start = feature(tmp_path, store, monkeypatch)  # inputs are made while every package is still there
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(TokenportError) as raised:
        start()
    assert f"pip install 'tokenport[{extra}]'" in str(raised.value), (case, str(raised.value))
    assert set(re.findall(r"tokenport\[(\w+)\]", str(raised.value))) <= extras()
    assert not isinstance(raised.value.__cause__, TokenportError)  # one error, not a chain of ours
    assert sorted(p.name for p in tmp_path.iterdir()) == before, case  # nothing written
    assert not metrics.enabled()


def test_every_extra_a_message_names_is_declared():
    """The extras named in source (``extra="..."`` and ``tokenport[...]`` in messages) all exist in pyproject."""
    named: set[str] = set()
    for path in set(SRC.rglob("*.py")) - {SRC / "_optional.py"}:  # _optional's docstring says 'tokenport[extra]'
        text = path.read_text(encoding="utf-8")
        named.update(re.findall(r"""extra=["'](\w+)["']""", text))
        named.update(re.findall(r"pip install '?tokenport\[(\w+)\]", text))
        named.update(re.findall(r"""require\(\s*["'][\w.]+["'],\s*["'](\w+)["']\)""", text))  # tokenizers' own
    assert {"metrics", "yaml", "fast", "parquet", "lang", "chat", "torch", "grain", "trainer", "ray"} <= named
    assert named <= extras(), named - extras()


def test_the_tour_extra_covers_the_demo_and_the_tour():
    assert set(re.findall(r"tokenport\[([\w,]+)\]", str(tomllib.loads((ROOT / "pyproject.toml").read_text())))) >= {
        "torch,chat,hf,yaml,plot,metrics"
    }


def test_missing_extra_error_is_a_module_not_found_error_too(monkeypatch):
    """Code that catches ModuleNotFoundError (as the demo's torch stages do) keeps working."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        metrics.enable()
    assert raised.value.name == "prometheus_client"
