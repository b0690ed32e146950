"""The commands agree with each other: -o on every verb that writes, a verb's own usage for its
mistakes, one --json shape, quiet broken pipes, optional imports refused before any work, a
demo help listing every stage, and a Markdown reference generated from the parser."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.cli import _parser, main, reference_markdown
from tokenport.cli.parser import _VERBS
from tokenport.indexed.inspect import summarize

DEMO = Path(tp.__file__).resolve().parent / "demo"


@pytest.fixture
def stores(tmp_path):
    identity = tp.load_tokenizer("byte").identity()
    for name, text in (("a", "hello world"), ("b", "print('tokenport')")):
        build_store(tmp_path / name, [list((text * (k + 1)).encode()) + [256] for k in range(20)], tokenizer=identity)
    return tmp_path


def _json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) in (0, 1)
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)  # ONE object, never a bare list
    return data


# -- 1. -o/--output on every verb that writes ---------------------------------------------------------


def test_merge_takes_its_output_with_o(stores, capsys):
    a, b = str(stores / "a"), str(stores / "b")
    assert main(["merge", "-o", str(stores / "ab"), a, b]) == 0
    assert main(["merge", "--output", str(stores / "ba"), b, a]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert len(tp.IndexedDataset(stores / "ab")) == len(tp.IndexedDataset(stores / "ba")) == 40


def test_merge_old_positional_form_works_with_a_deprecation_warning(stores, capsys):
    assert main(["merge", str(stores / "ab"), str(stores / "a"), str(stores / "b")]) == 0
    captured = capsys.readouterr()
    assert "merged 2 stores" in captured.out
    assert "`merge OUT IN...` is deprecated; use `tokenport merge -o OUT IN...`" in captured.err
    assert len(tp.IndexedDataset(stores / "ab")) == 40


def test_merge_refuses_an_output_given_twice_and_writes_nothing(stores, capsys):
    before = sorted(os.listdir(stores))
    assert main(["merge", "-o", str(stores / "ab"), str(stores / "other"), str(stores / "a")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tokenport: error: merge: ") and err.count("\n") == 1
    assert f"-o {stores / 'ab'}" in err and str(stores / "other") in err and "give the output once" in err
    assert main(["merge", str(stores / "a")]) == 2  # no -o and nothing after the output
    assert "tokenport merge -o stores/all IN..." in capsys.readouterr().err
    assert sorted(os.listdir(stores)) == before


def _small_files() -> None:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


def test_a_full_disk_under_merge_names_its_output(tmp_path):
    """A write that fails for room (here a file-size limit) and names no file: the line names the verb's
    output and what to do, not only the reason ("File too large")."""
    identity = tp.load_tokenizer("byte").identity()
    build_store(tmp_path / "big", [list(b"x" * 400) + [256] for _ in range(100)], tokenizer=identity)
    command = [sys.executable, "-m", "tokenport", "merge", "-o", "merged", "big"]
    done = subprocess.run(command, cwd=tmp_path, preexec_fn=_small_files, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tokenport: error: merged"), done.stderr
    assert "another -o/--output" in done.stderr and "Traceback" not in done.stderr


def test_build_cache_o_overrides_the_plans_cache_dir(stores, capsys):
    plan = stores / "plan.json"
    plan.write_text(
        '{"cache_dir": "cache", "datasets": ["a", "b"], "split": "1,0,0", '
        '"samples": {"train": 4}, "seq_length": 16, "seed": 1}'
    )
    built = _json(capsys, ["build-cache", str(plan), "-o", str(stores / "elsewhere")])
    assert built["cache_dir"] == str(stores / "elsewhere") and built["built"] == 2
    assert os.listdir(stores / "elsewhere") and not (stores / "cache").exists()
    again = _json(capsys, ["build-cache", str(plan), "--output", str(stores / "elsewhere")])
    assert again["built"] == 0  # the same cache, found


def test_demo_output_flag_and_its_old_spelling(capsys):
    assert _parser().parse_args(["demo", "-o", "x"]).output == "x"
    assert _parser().parse_args(["demo", "--output", "y"]).output == "y"
    assert _parser().parse_args(["demo"]).output == "tokenport-demo"
    capsys.readouterr()
    assert _parser().parse_args(["demo", "--workdir", "z"]).output == "z"
    assert "--workdir is deprecated; use --output" in capsys.readouterr().err


def test_side_products_say_so_in_their_help(capsys):
    for verb, flag in (("report", "--html"), ("blend", "--plot")):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        assert "a side product" in " ".join(capsys.readouterr().out.split()), (verb, flag)


# -- 2. a verb's mistakes print the verb's usage ------------------------------------------------------

_MINIMAL = {
    "demo": [],
    "prepare": ["in.jsonl", "-o", "out"],
    "report": ["out"],
    "inspect": ["x"],
    "verify": ["x"],
    "build-cache": ["plan.json"],
    "blend": ["x"],
    "pack-report": ["x"],
    "trace": ["state.json", "--step", "1"],
    "merge": ["-o", "out", "x"],
    "where": ["state.json", "--store", "s", "--document", "1"],
    "why": ["out", "--input", "in.jsonl:1"],
    "audit": ["state.json"],
    "takedown": ["state.json", "--store", "s", "--document", "1", "-o", "new.json"],
}


def test_every_verb_is_checked_for_its_usage():
    assert set(_MINIMAL) == set(_VERBS)


@pytest.mark.parametrize("verb", sorted(_MINIMAL))
def test_an_unknown_flag_prints_the_verbs_usage(verb, capsys):
    with pytest.raises(SystemExit) as exit:
        main([verb, "--bogus", *_MINIMAL[verb]])
    err = capsys.readouterr().err
    assert exit.value.code == 2
    assert err.startswith(f"usage: tokenport {verb}") and "unrecognized arguments: --bogus" in err
    assert f"see `tokenport {verb} --help`" in err


def test_inspect_bogus_in_a_real_process():
    command = [sys.executable, "-m", "tokenport", "inspect", "--bogus", "x"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: tokenport inspect") and "--bogus" in done.stderr


def test_a_bad_value_prints_the_verbs_usage(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["inspect", "x", "--documents", "many"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith("usage: tokenport inspect") and "--documents" in err


# -- 3. blend without --size: one epoch of its stores -------------------------------------------------


def test_blend_without_size_blends_one_epoch(stores, capsys):
    a, b = str(stores / "a"), str(stores / "b")
    tokens = summarize(a).tokens + summarize(b).tokens
    shown = _json(capsys, ["blend", "1", a, "3", b, "--seq-length", "16"])
    assert [report["size"] for report in shown["blends"]] == [tokens // 16]
    assert _json(capsys, ["blend", a, b])["blends"][0]["size"] == max(1, tokens // 4096)
    (stores / "spec.json").write_text(json.dumps({"blend": [1, a, 1, b]}))
    assert _json(capsys, ["blend", str(stores / "spec.json"), "--seq-length", "8"])["blends"][0]["size"] == tokens // 8
    assert _json(capsys, ["blend", a, "--size", "7"])["blends"][0]["size"] == 7  # --size still wins


def test_blend_help_states_the_size_default(capsys):
    with pytest.raises(SystemExit):
        main(["blend", "--help"])
    assert "default: one epoch: the stores' tokens / --seq-length" in " ".join(capsys.readouterr().out.split())


# -- 4. one --json shape ------------------------------------------------------------------------------


def test_inspect_of_a_prepare_output_lists_its_parts_and_a_total(tmp_path, capsys):
    for name, text in (("x", "first"), ("y", "second one")):
        (tmp_path / f"{name}.jsonl").write_text(f'{{"text": "{text}"}}\n')
    out = str(tmp_path / "web")
    inputs = [str(tmp_path / "x.jsonl"), str(tmp_path / "y.jsonl")]
    assert main(["prepare", *inputs, "-o", out, "-q", "--workers", "1"]) == 0
    shown = _json(capsys, ["inspect", out])
    assert [store["prefix"] for store in shown["stores"]] == [f"{out}/part-00000", f"{out}/part-00001"]
    total = shown["total"]
    assert total.pop("bin_bytes") > 0
    assert total == {"stores": 2, "documents": 2, "sequences": 2, "tokens": 6 + 11}
    assert main(["inspect", out]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("total      2 stores  2 documents  2 sequences  17 tokens")
    assert main(["inspect", f"{out}/part-00000"]) == 0
    assert "total" not in capsys.readouterr().out  # one store: its own counts are the total


def test_every_reporting_verb_prints_one_json_object(stores, capsys):
    a = str(stores / "a")
    assert set(_json(capsys, ["inspect", a])) == {"stores", "total"}
    assert set(_json(capsys, ["verify", a])) == {"stores", "total"}
    assert set(_json(capsys, ["blend", a])) == {"blends"}
    assert "sequences" in _json(capsys, ["merge", "-o", str(stores / "m"), a])
    assert "data_parallel_size" in _json(capsys, ["pack-report", a])


# -- 5. a reader that goes away -----------------------------------------------------------------------


@pytest.mark.parametrize("extra", [["--json"], [], ["--help"]])
def test_a_closed_pipe_ends_quietly(stores, extra):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line (as `| head -0`; `| head -1` after one)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tokenport", "inspect", str(stores / "a"), str(stores / "b"), *extra],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write)
    assert done.returncode in (0, 141), done.stderr
    assert done.stderr == ""


def test_head_one_reads_a_line_and_the_command_ends_quietly(stores):
    command = f"{sys.executable} -m tokenport inspect {stores / 'a'} {stores / 'b'} --json | head -1"
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], capture_output=True, text=True)
    assert done.stdout == "{\n" and done.stderr == "" and done.returncode in (0, 141)


# -- 6. demo --help lists every stage -----------------------------------------------------------------


def _demo_stages() -> list[str]:
    found = []
    for path in sorted(DEMO.glob("*.py")):
        found += re.findall(r'"(?:\\n)?== (\d+\. [^"]+)"', path.read_text(encoding="utf-8"))
    return sorted(found, key=lambda title: int(title.split(".")[0]))


def test_demo_help_lists_every_stage_the_demo_prints(capsys):
    stages = _demo_stages()
    assert [int(title.split(".")[0]) for title in stages] == list(range(1, 16))
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    missing = [title for title in stages if title not in text]
    assert missing == []


# -- 7. a missing optional package is named before any work --------------------------------------------


def test_blend_plot_without_matplotlib_fails_before_its_table(stores, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["blend", "1", str(stores / "a"), "--size", "10", "--plot", str(stores / "p.png")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "pip install 'tokenport[plot]'" in captured.err and "blend --plot" in captured.err
    assert not (stores / "p.png").exists()


@pytest.mark.parametrize("verb", ["blend", "build-cache", "prepare"])
def test_a_yaml_file_without_pyyaml_fails_naming_the_extra(stores, capsys, monkeypatch, verb):
    (stores / "in.jsonl").write_text('{"text": "alpha"}\n')
    (stores / "f.yaml").write_text("anything: 1\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    argv = {
        "blend": ["blend", str(stores / "f.yaml")],
        "build-cache": ["build-cache", str(stores / "f.yaml")],
        "prepare": ["prepare", str(stores / "in.jsonl"), "-o", str(stores / "out"), "--steps", str(stores / "f.yaml")],
    }[verb]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "pip install 'tokenport[yaml]'" in captured.err and "f.yaml" in captured.err
    assert not (stores / "out").exists()


# -- 8. the CLI reference ------------------------------------------------------------------------------


def test_the_reference_names_every_verb_and_flag_and_is_deterministic(monkeypatch):
    text = reference_markdown()
    monkeypatch.setenv("COLUMNS", "37")  # the terminal's width does not change the page
    assert reference_markdown() == text
    parser = _parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in verbs.choices.items():
        assert f"\n## tokenport {name}\n" in text
        section = text.split(f"\n## tokenport {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for option in action.option_strings:
                assert option in section, (name, option)
            if not action.option_strings:
                assert f"- `{action.metavar or action.dest}`" in section, (name, action.dest)
    assert "(default: 'tijdeman')" in text and "(default: 3)" in text  # library defaults filled in
    assert all(title in text for title in _demo_stages())


def test_merge_old_form_does_not_take_an_existing_store_for_its_output(stores, capsys):
    """`merge a b` meant "merge a and b" to a newcomer; the old form read it as "write a from b" and
    offered --force, which would replace store a."""
    a, b = str(stores / "a"), str(stores / "b")
    before = (stores / "a.bin").read_bytes()
    assert main(["merge", a, b]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"tokenport merge -o stores/all {a} {b}" in err and "--force" in err
    assert (stores / "a.bin").read_bytes() == before and len(tp.IndexedDataset(a)) == 20


def test_an_optional_import_deep_in_a_verb_names_its_extra(tmp_path, capsys, monkeypatch):
    """trace of a torch checkpoint imports torch inside the library: without torch, one line naming
    the extra, not a ModuleNotFoundError traceback."""
    (tmp_path / "step.pt").write_bytes(b"PK\x03\x04 not json")
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["trace", str(tmp_path / "step.pt"), "--step", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "'torch' package" in captured.err and "pip install 'tokenport[torch]'" in captured.err


def test_blend_refuses_a_size_its_state_would_ignore_and_a_bad_seq_length(stores, capsys):
    (stores / "state.json").write_text("{}")
    assert main(["blend", "--state", str(stores / "state.json"), "--size", "10"]) == 2
    assert "--size sets a spec's samples" in capsys.readouterr().err
    assert main(["blend", str(stores / "a"), "--seq-length", "0"]) == 2
    err = capsys.readouterr().err
    assert "seq_length=0 is invalid" in err and "--seq-length" in err


def test_the_package_runs_as_a_module_as_cli_py_did():
    done = subprocess.run([sys.executable, "-m", "tokenport.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("tokenport ")


def test_the_bare_help_loads_no_numpy():
    """The parser's modules import only the standard library and numpy-free ground modules: an
    import of _checks at the top of cli/verbs.py once doubled `tokenport --help`'s start-up."""
    from tests.test_public_api import loaded_after

    modules = loaded_after("from tokenport.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert "numpy" not in modules


def test_the_json_help_names_the_shape_it_prints(capsys):
    for verb, key in (("inspect", '"stores"'), ("verify", '"total"'), ("blend", '"trajectories"')):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        assert key in capsys.readouterr().out, verb


def test_a_misspelt_verb_is_named_with_the_closest_verb(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["inspct", "x"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "'inspct' is not a verb: did you mean `tokenport inspect`?" in err
    with pytest.raises(SystemExit):
        main(["zzz"])
    assert "the verbs are demo, prepare" in capsys.readouterr().err
