"""The `tokenport` command: verbs print results, faults exit non-zero with the file named."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.blend import ALGORITHMS
from tokenport.builder.plan import CacheEntry, CacheReport
from tokenport.builder.report import blend_report
from tokenport.builder.specs import spec_from_arguments
from tokenport.cli import _parser, main
from tokenport.corpus import PrepareConfig
from tokenport.corpus.run.config import config_from_options, load_steps
from tokenport.corpus.run.pipeline import PrepareResult
from tokenport.corpus.run.report import load_report
from tokenport.errors import ConfigError
from tokenport.indexed import resolve_stores
from tokenport.indexed.inspect import lengths_of, summarize
from tokenport.indexed.merge import merge_report
from tokenport.indexed.verify import check_store, verify
from tokenport.sampling.report import batching_report


@pytest.fixture
def stores(tmp_path):
    identity = tp.load_tokenizer("byte").identity()
    for name, text in (("a", "hello world"), ("b", "print('tokenport')")):
        documents = [list((text * (k + 1)).encode()) + [256] for k in range(20)]
        build_store(tmp_path / name, documents, tokenizer=identity)
    return tmp_path


def test_inspect_shows_counts_percentiles_and_text(stores, capsys):
    assert main(["inspect", str(stores / "a")]) == 0
    out = capsys.readouterr().out
    assert "documents  20" in out
    assert "tokens     2,330" in out
    assert "p50=" in out and "#" in out
    assert "document 0: hello world" in out


@pytest.mark.parametrize("count", ["-1", "-100", str(2**64)])
def test_inspect_refuses_a_document_count_it_cannot_show(stores, capsys, count):
    """--documents -1 used to exit 0 showing no documents, as if the store had none."""
    assert main(["inspect", str(stores / "a"), "--documents", count]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokenport: ") and f"documents={count} is invalid" in err
    with pytest.raises(tp.ConfigError, match="preview_chars=-1"):
        summarize(str(stores / "a"), preview_chars=-1)


def test_verify_ok_and_fault(stores, capsys):
    assert main(["verify", str(stores / "a"), str(stores / "b")]) == 0
    assert capsys.readouterr().out.count("ok ") == 2
    with open(stores / "b.bin", "r+b") as f:
        f.write(b"\x00\x01")
    assert main(["verify", str(stores / "a"), str(stores / "b")]) == 1
    err = capsys.readouterr().err
    assert "FAIL" in err and "b.bin: block 0" in err


def test_merge(stores, capsys):
    assert main(["merge", "-o", str(stores / "ab"), str(stores / "a"), str(stores / "b")]) == 0
    assert "40 sequences" in capsys.readouterr().out
    merged = tp.IndexedDataset(stores / "ab")
    assert np.array_equal(merged[20], tp.IndexedDataset(stores / "b")[0])


def test_errors_are_one_line_not_tracebacks(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tokenport", "inspect", str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.startswith("tokenport: error: ") and "missing.idx" in result.stderr
    assert "Traceback" not in result.stderr


def test_prepare_verb_and_bad_input(tmp_path, capsys):
    corpus = tmp_path / "in.jsonl"
    corpus.write_text('{"text": "alpha"}\n{"text": "beta"}\n')
    assert main(["prepare", str(corpus), "-o", str(tmp_path / "out"), "--workers", "1", "-q"]) == 0
    assert "2 documents" in capsys.readouterr().out
    store = tp.IndexedDataset(tmp_path / "out" / "part-00000")
    assert bytes(store[1][:-1].astype("uint8")) == b"beta"

    corpus.write_text('{"text": "alpha"}\n{"text": oops}\n')
    assert main(["prepare", str(corpus), "-o", str(tmp_path / "bad"), "--workers", "1", "-q"]) == 2
    err = capsys.readouterr().err
    assert "in.jsonl" in err and "line 2" in err
    assert (
        main(["prepare", str(corpus), "-o", str(tmp_path / "skip"), "--workers", "1", "-q", "--on-error", "skip"]) == 0
    )
    out = capsys.readouterr().out
    assert "1 documents" in out and "skipped: bad_json 1" in out


def _files(prefix) -> list[str]:
    """What a shell glob such as ``prefix*`` expands to: the store's three files, sorted."""
    return sorted(str(prefix) + suffix for suffix in (".bin", ".idx", ".json"))


def test_merge_of_a_glob_takes_each_store_once(stores, capsys):
    # `tokenport merge out stores/*`: the .bin, .idx and .json of one store are one input, not three
    assert main(["merge", "-o", str(stores / "ab"), *_files(stores / "a"), *_files(stores / "b")]) == 0
    assert "merged 2 stores" in capsys.readouterr().out
    merged = tp.IndexedDataset(stores / "ab")
    assert len(merged) == 40
    assert np.array_equal(merged[20], tp.IndexedDataset(stores / "b")[0])


def test_inspect_and_verify_of_a_glob_show_each_store_once(stores, capsys):
    assert main(["verify", *_files(stores / "a")]) == 0
    assert capsys.readouterr().out.count("ok ") == 1
    assert main(["inspect", *_files(stores / "a"), "--documents", "0"]) == 0
    assert capsys.readouterr().out.count("documents  20") == 1
    assert main(["pack-report", *_files(stores / "a"), "--ranks", "2"]) == 0


@pytest.mark.parametrize("verb", ["merge", "verify", "inspect", "pack-report"])
@pytest.mark.parametrize("repeat", [["a", "a"], ["a", "a.bin"], ["a.bin", "b", "a.bin"]])
def test_a_store_named_twice_is_refused(stores, capsys, verb, repeat):
    head = [verb, "-o", str(stores / "out")] if verb == "merge" else [verb]
    assert main(head + [str(stores / name) for name in repeat]) == 2
    err = capsys.readouterr().err
    assert "given twice" in err and str(stores / "a") in err
    assert not (stores / "out.bin").exists()


def test_a_prepare_output_directory_means_its_parts_in_order(tmp_path, capsys):
    for name, text in (("x", "first"), ("y", "second")):
        (tmp_path / f"{name}.jsonl").write_text(f'{{"text": "{text}"}}\n')
    out = tmp_path / "web"
    assert (
        main(["prepare", str(tmp_path / "x.jsonl"), str(tmp_path / "y.jsonl"), "-o", str(out), "--workers", "1", "-q"])
        == 0
    )
    assert resolve_stores([out]) == [str(out / "part-00000"), str(out / "part-00001")]
    assert main(["merge", "-o", str(tmp_path / "all"), str(out)]) == 0
    capsys.readouterr()
    merged = tp.IndexedDataset(tmp_path / "all")
    assert [bytes(merged[i][:-1].astype("uint8")) for i in range(len(merged))] == [b"first", b"second"]
    assert main(["verify", str(out)]) == 0
    assert capsys.readouterr().out.count("ok ") == 2
    assert main(["inspect", str(tmp_path)]) == 2
    assert "without tokenport.json" in capsys.readouterr().err


def test_merge_refuses_to_overwrite_without_force(stores, capsys):
    assert main(["merge", "-o", str(stores / "ab"), str(stores / "a")]) == 0
    assert main(["merge", "-o", str(stores / "ab"), str(stores / "a"), str(stores / "b")]) == 2
    err = capsys.readouterr().err
    assert "ab already exists" in err and "--force" in err
    assert len(tp.IndexedDataset(stores / "ab")) == 20
    assert main(["merge", "-o", str(stores / "ab"), str(stores / "a"), str(stores / "b"), "--force"]) == 0
    assert len(tp.IndexedDataset(stores / "ab")) == 40
    assert main(["merge", "-o", str(stores / "a"), str(stores / "a.bin"), str(stores / "b"), "--force"]) == 2
    assert "also an input" in capsys.readouterr().err


@pytest.fixture
def blocked(stores):
    """``stores`` plus a plain file named ``file`` (paths under it cannot be created or read)."""
    (stores / "file").write_text("not a directory")
    (stores / "plan.json").write_text(
        '{"cache_dir": "%s", "datasets": ["%s"], "split": "1,0,0", "samples": {"train": 4, "valid": 0, "test": 0},'
        ' "seq_length": 16, "seed": 1}' % (stores / "file" / "cache", stores / "a")
    )
    corpus = stores / "in.jsonl"
    corpus.write_text('{"text": "alpha"}\n')
    assert main(["prepare", str(corpus), "-o", str(stores / "run"), "--workers", "1", "-q"]) == 0
    return stores


# (verb arguments, the path the one-line error must name); {d} is the fixture's directory
_MISSING_OR_BLOCKED = [
    (["inspect", "{d}/missing"], "missing.idx"),
    (["inspect", "{d}/file/a"], "file/a"),
    (["verify", "{d}/missing"], "missing.idx"),
    (["verify", "{d}/file/a"], "file/a"),
    (["merge", "-o", "{d}/out", "{d}/missing"], "missing.idx"),
    (["merge", "-o", "{d}/file/out", "{d}/a"], "{d}/file"),  # the file in the way
    (["pack-report", "{d}/missing"], "missing.idx"),
    (["pack-report", "{d}/file/a.bin"], "file/a"),
    (["report", "{d}/missing"], "missing"),
    (["report", "{d}/run", "--html", "{d}/file/page.html"], "file/page.html"),
    (["report", "{d}/run", "--html", "{d}"], "{d}"),
    (["build-cache", "{d}/missing.json"], "missing.json"),
    (["build-cache", "{d}/plan.json"], "file/cache"),
    (["blend", "{d}/missing.yaml", "--size", "4"], "missing.yaml"),
    (["blend", "1", "{d}/missing", "--size", "4"], "missing.idx"),
    (["demo", "-o", "{d}/file/demo", "--limit", "1"], "file/demo"),
    (["build-cache", "{d}/plan.json", "-o", "{d}/file/other"], "file/other"),
    (["prepare", "{d}/missing.jsonl", "-o", "{d}/out"], "missing.jsonl"),
]


@pytest.mark.parametrize("argv, names", _MISSING_OR_BLOCKED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_verb_reports_a_bad_path_in_one_line(blocked, capsys, argv, names):
    capsys.readouterr()
    assert main([arg.format(d=blocked) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokenport: error: ") and err.count("\n") == 1, err
    assert names.format(d=blocked) in err


def test_blend_of_a_glob_weighs_each_store_once(stores, capsys):
    assert main(["blend", str(stores / "a"), str(stores / "b"), "--size", "100"]) == 0
    by_prefix = capsys.readouterr().out
    assert main(["blend", *_files(stores / "a"), *_files(stores / "b"), "--size", "100"]) == 0
    assert capsys.readouterr().out == by_prefix
    assert main(["blend", "1", str(stores / "a"), "2", str(stores / "a.bin"), "--size", "100"]) == 2
    assert "given twice" in capsys.readouterr().err


def test_build_cache_plan_datasets_take_each_store_once(stores, capsys):
    plan = stores / "plan.json"
    datasets = ", ".join(f'"{name}"' for name in ["a.bin", "a.idx", "a.json", "b"])
    plan.write_text(
        '{"cache_dir": "cache", "datasets": [%s], "split": "1,0,0", '
        '"samples": {"train": 4}, "seq_length": 16, "seed": 1}' % datasets
    )
    assert main(["build-cache", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "2 index sets" in out and out.count("built ") == 2
    plan.write_text(
        '{"cache_dir": "cache", "datasets": ["a", "b", "a.bin"], "split": "1,0,0", '
        '"samples": {"train": 4}, "seq_length": 16, "seed": 1}'
    )
    assert main(["build-cache", str(plan)]) == 2
    assert "plan.json: 'datasets' store" in capsys.readouterr().err


# -- --json: every verb that reports prints ONE object: its report's to_json(), or them under a key ----


def _json_of(capsys, argv) -> object:
    capsys.readouterr()
    assert main(argv + ["--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


def test_inspect_verify_merge_json_equal_the_reports(stores, capsys):
    a, b = str(stores / "a"), str(stores / "b")
    shown = _json_of(capsys, ["inspect", a, b])
    assert shown["stores"] == [summarize(a).to_json(), summarize(b).to_json()]
    tokens = summarize(a).tokens + summarize(b).tokens
    assert shown["total"].pop("bin_bytes") > 0
    assert shown["total"] == {"stores": 2, "documents": 40, "sequences": 40, "tokens": tokens}
    assert _json_of(capsys, ["verify", a]) == {"stores": [verify(a).to_json()], "total": {"stores": 1, "failed": 0}}
    with open(stores / "b.bin", "r+b") as f:
        f.write(b"\x00\x01")
    verdicts = _json_of(capsys, ["verify", a, b])
    assert verdicts["stores"] == [check_store(a).to_json(), check_store(b).to_json()]
    assert verdicts["total"] == {"stores": 2, "failed": 1}
    assert [v["ok"] for v in verdicts["stores"]] == [True, False] and "b.bin: block 0" in verdicts["stores"][1]["error"]
    merged = _json_of(capsys, ["merge", "-o", str(stores / "ab"), a])
    assert merged == merge_report(stores / "ab", 1).to_json() and merged["sequences"] == 20


def test_blend_and_pack_report_json_equal_the_reports(stores, capsys):
    a, b = str(stores / "a"), str(stores / "b")
    out = _json_of(capsys, ["blend", "1", a, "3", b, "--size", "50", "--algorithm", "greedy"])
    spec = spec_from_arguments(["1", a, "3", b])
    assert out == {"blends": [r.to_json() for r in blend_report(spec, 50, algorithm="greedy")]}
    (shown,) = out["blends"]
    assert shown["algorithm"] == "greedy" and shown["rows"][1]["samples"] > shown["rows"][0]["samples"]
    out = _json_of(capsys, ["pack-report", a, "--ranks", "2", "--batch-size", "4"])
    assert out == batching_report(lengths_of([a]), 4, data_parallel_size=2).to_json()
    assert out["data_parallel_size"] == 2 and out["capacity"] == 4096


def test_prepare_report_and_build_cache_json(tmp_path, stores, capsys):
    corpus = tmp_path / "in.jsonl"
    corpus.write_text('{"text": "alpha"}\n{"text": "beta"}\n')
    result = _json_of(capsys, ["prepare", str(corpus), "-o", str(tmp_path / "out"), "--workers", "1", "-q"])
    assert result["documents"] == 2 and result["parts"] == [str(tmp_path / "out" / "part-00000")]
    assert PrepareResult(**{**result, "parts": tuple(result["parts"])}).to_json() == result
    assert _json_of(capsys, ["report", str(tmp_path / "out")]) == load_report(str(tmp_path / "out")).to_json()
    plan = stores / "plan.json"
    plan.write_text(
        '{"cache_dir": "cache", "datasets": ["a", "b"], "split": "1,0,0", '
        '"samples": {"train": 4}, "seq_length": 16, "seed": 1}'
    )
    built = _json_of(capsys, ["build-cache", str(plan)])
    assert built["built"] == 2 and [e["dataset"] for e in built["entries"]] == [str(stores / "a"), str(stores / "b")]
    again = _json_of(capsys, ["build-cache", str(plan)])
    assert again == CacheReport(again["cache_dir"], tuple(CacheEntry(**e) for e in again["entries"])).to_json()
    assert again["built"] == 0 and [e["key"] for e in again["entries"]] == [e["key"] for e in built["entries"]]


# -- the parser: -v/-q anywhere, choices and defaults from the library --------------------------------


@pytest.mark.parametrize("argv", [["-v", "inspect", "x"], ["inspect", "x", "-v"], ["inspect", "-v", "x"]])
def test_verbose_before_or_after_the_verb(argv):
    args = _parser().parse_args(argv)
    assert args.verbose and not args.quiet


@pytest.mark.parametrize("argv", [["-q", "prepare", "in", "-o", "out"], ["prepare", "in", "-o", "out", "-q"]])
def test_quiet_before_or_after_the_verb(argv):
    args = _parser().parse_args(argv)
    assert args.quiet and not args.verbose


def test_verbose_and_quiet_together_are_refused(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["-v", "inspect", "x", "-q"])
    assert exit.value.code == 2 and "contradict" in capsys.readouterr().err


def _options(verb: str) -> dict[str, argparse.Action]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[verb]
    return {option: action for action in sub._actions for option in action.option_strings}


def test_choices_are_the_library_constants(monkeypatch):
    from tokenport.corpus.run import config

    assert list(_options("blend")["--algorithm"].choices) == list(ALGORITHMS)
    assert list(_options("prepare")["--shard-by"].choices) == list(config.SHARD_BY)
    assert list(_options("prepare")["--on-error"].choices) == list(config.ON_ERROR)
    assert list(_options("prepare")["--executor"].choices) == list(config.EXECUTORS)
    # read from the library, not copied: a new algorithm or executor is a choice without a CLI edit
    monkeypatch.setattr("tokenport.blend.indices.ALGORITHMS", (*ALGORITHMS, "new"))
    monkeypatch.setattr(config, "EXECUTORS", (*config.EXECUTORS, "new"))
    assert _parser().parse_args(["blend", "x", "--size", "1", "--algorithm", "new"]).algorithm == "new"
    assert list(_options("prepare")["--executor"].choices) == [*config.EXECUTORS]


def _help(verb: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tokenport", verb, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "10000"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_help_shows_the_tokenizer_forms_and_the_library_defaults():
    from tokenport.tokenizers import SPEC_FORMS

    text = _help("prepare")
    assert all(form in text for form in SPEC_FORMS) and "gigatoken:" in text
    for option, field in [
        ("--tokenizer", "tokenizer"),
        ("--shard-by", "shard_by"),
        ("--on-error", "on_error"),
        ("--text-key", "text_key"),
        ("--executor", "executor"),
    ]:
        assert _options("prepare")[option].default is None  # the config decides, not a copy here
        assert f"(default: {PrepareConfig.__dataclass_fields__[field].default!r})" in text
    assert "(default: 'tijdeman')" in _help("blend")
    assert inspect.signature(blend_report).parameters["algorithm"].default == "tijdeman"


# -- the decisions the CLI used to make, now in the library --------------------------------------------


def test_spec_from_arguments_tells_a_spec_file_from_a_megatron_list(stores):
    (stores / "spec.yaml").write_text(f"blend: [3, {stores / 'a'}, 1, {stores / 'b'}]\n")
    by_file = spec_from_arguments([str(stores / "spec.yaml")])
    by_list = spec_from_arguments(["3", str(stores / "a"), "1", str(stores / "b")])
    assert by_file.blend.prefixes == by_list.blend.prefixes == (str(stores / "a"), str(stores / "b"))
    assert by_file.blend.normalized() == by_list.blend.normalized() == [0.75, 0.25]
    with pytest.raises(ConfigError, match="missing.json"):
        spec_from_arguments([str(stores / "missing.json")])


def test_load_steps_reads_a_list_or_a_steps_key(tmp_path):
    listed, keyed = tmp_path / "a.json", tmp_path / "b.yaml"
    listed.write_text('[{"step": "gopher_quality"}]')
    keyed.write_text("steps:\n  - step: gopher_quality\n")
    assert load_steps(listed) == load_steps(keyed) == [{"step": "gopher_quality"}]
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(ConfigError, match="bad.json"):
        load_steps(tmp_path / "bad.json")


def test_config_from_options_refuses_a_flag_that_means_nothing_alone(tmp_path, capsys):
    corpus = tmp_path / "in.jsonl"
    corpus.write_text('{"text": "alpha"}\n')
    assert (
        config_from_options(
            [str(corpus)], str(tmp_path / "out"), {"shard_tokens": 8, "shard_by": "tokens"}
        ).shard_tokens
        == 8
    )
    with pytest.raises(ConfigError, match="--shard-tokens sizes parts only with --shard-by tokens"):
        config_from_options([str(corpus)], str(tmp_path / "out"), {"shard_tokens": 8})
    assert main(["prepare", str(corpus), "-o", str(tmp_path / "out"), "--address", "auto"]) == 2
    assert "--address names a Ray cluster only with --executor ray" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_blend_reports_a_scheduled_blend_over_the_run(stores, capsys, tmp_path):
    (tmp_path / "spec.yaml").write_text(
        f"blend: [1, {stores / 'a'}, 1, {stores / 'b'}]\n"
        "schedule:\n  - {at: 0, weights: [1, 0]}\n  - {at: 60, ramp_to: [0, 1], until: 100}\n"
    )
    plot = tmp_path / "mix.png"
    assert main(["blend", str(tmp_path / "spec.yaml"), "--size", "120", "--windows", "3", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "target -> realized" in out and "1.000 -> 1.000" in out and plot.stat().st_size > 1000
    data = _json_of(capsys, ["blend", str(tmp_path / "spec.yaml"), "--size", "120", "--windows", "3"])
    (trajectory,) = data["trajectories"]
    assert np.allclose(trajectory["target"][0], [1, 0]) and np.allclose(trajectory["target"][2], [0.125, 0.875])


def test_blend_reports_an_adaptive_run_from_its_loader_state(stores, capsys, tmp_path):
    pytest.importorskip("torch")
    from tokenport.integrations import StatefulLoader
    from tokenport.sampling import PretrainingSampler

    config = tp.GPTSampleConfig(8, 256)
    children = [tp.GPTDataset(tp.IndexedDataset(stores / name), np.arange(20), 40, config, 1) for name in "ab"]
    blend = tp.AdaptiveBlend(children, [1, 1], num_samples=80)
    loader = StatefulLoader(blend, PretrainingSampler(80, 0, 4, 0, 1))
    for step, _ in enumerate(loader):
        loader.set_mixture([1, step % 3])
    (tmp_path / "state.json").write_text(json.dumps(loader.state_dict()))
    data = _json_of(capsys, ["blend", "--state", str(tmp_path / "state.json"), "--windows", "4"])
    (trajectory,) = data["trajectories"]
    assert trajectory["updates"] == len(blend.updates) and trajectory["ends"][-1] == 80
    assert trajectory["labels"] == [str(stores / "a"), str(stores / "b")]
    windows = [np.bincount(blend.dataset_index[k : k + 20], minlength=2) / 20 for k in range(0, 80, 20)]
    assert np.allclose(trajectory["realized"], windows)  # the stream rebuilt from the state is the one trained on
    assert main(["blend", "--state", str(tmp_path / "state.json"), str(stores / "a")]) == 2
    assert "not both" in capsys.readouterr().err


def test_inspect_names_the_tokenizer_as_given_once(tmp_path, capsys):
    byte = tp.load_tokenizer("byte").identity()
    for name, identity, shown in (
        ("byte", byte, "tokenizer  byte  vocab 257"),
        ("hf", {**byte, "kind": "hf", "name": "hf:tokenizer.json"}, "tokenizer  hf:tokenizer.json  vocab 257"),
        ("folder", {**byte, "kind": "hf", "name": "my-tokenizer"}, "tokenizer  hf:my-tokenizer  vocab 257"),
    ):
        build_store(tmp_path / name, [[104, 105, 256]], tokenizer=identity)
        assert main(["inspect", str(tmp_path / name)]) == 0
        assert shown in capsys.readouterr().out
