"""`prepare` refuses what would come out empty or wrong, and says what to type instead."""

from __future__ import annotations

import json
import logging
import os
import pathlib

import pytest

from tokenport.cli import main
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.steps.registry import step_options
from tokenport.errors import ConfigError, InputDataError

ENGLISH = [
    "The committee met on Tuesday to discuss the budget for the coming year and agreed on most points.",
    "Please read the instructions carefully before you install the software on your computer.",
]


def corpus(tmp_path: pathlib.Path, records: list[dict]) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def config(tmp_path: pathlib.Path, inputs: list[str], **options) -> PrepareConfig:
    return PrepareConfig(inputs, str(tmp_path / "out"), workers=1, **options)


# -- step options are checked against what each step takes ----------------------------------------


def test_a_mistyped_step_option_lists_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError) as info:
        config(tmp_path, ["x.jsonl"], steps=[{"step": "gopher_quality", "min_word": 10}])
    message = str(info.value)
    assert "steps[0] (gopher_quality): unexpected option 'min_word' (did you mean 'min_words'?)" in message
    assert "valid options of gopher_quality: min_words, max_words" in message


def test_valid_options_come_from_each_step_constructor():
    # an option a step adds to its constructor is accepted without touching the registry
    assert step_options("language") == ("languages", "min_score")
    assert step_options("minhash_dedup") == ("bands", "rows", "ngram", "seed", "index", "save_index")


def test_a_required_step_option_is_named():
    with pytest.raises(ConfigError, match=r"steps\[0\] \(decontaminate\): option 'eval_files' is required"):
        PrepareConfig(["x.jsonl"], "out", steps=[{"step": "decontaminate"}])


@pytest.mark.parametrize("code, hint", [("english", "its code is 'en'"), ("qq", "valid codes: aa, ab")])
def test_an_unknown_language_code_is_refused_before_any_work(tmp_path, code, hint):
    pytest.importorskip("pycld2")
    with pytest.raises(ConfigError, match=rf"languages: '{code}' is not a language code CLD2 knows.*{hint}"):
        config(
            tmp_path,
            [corpus(tmp_path, [{"text": t} for t in ENGLISH])],
            steps=[{"step": "language", "languages": [code]}],
        )
    assert not (tmp_path / "out").exists()


def test_language_codes_with_regions_and_their_bases_are_accepted(tmp_path):
    pytest.importorskip("pycld2")
    config(tmp_path, ["x.jsonl"], steps=[{"step": "language", "languages": ["en", "zh", "zh-Hant", "EN"]}])


# -- a run that leaves nothing fails, unless asked to allow it --------------------------------------


@pytest.mark.parametrize("output", ["afile", "afile/sub"])
def test_an_output_that_is_a_file_is_refused_as_one(tmp_path, capsys, output):
    """It used to be 'cannot read it (Not a directory); check its permissions': the wrong remedy."""
    inputs = [corpus(tmp_path, [{"text": "hello"}])]
    (tmp_path / "afile").write_text("mine")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ConfigError, match=r"afile(/sub)?: is not a directory \(it, or one above it, is a file\)"):
        prepare(PrepareConfig(inputs, str(tmp_path / output), workers=1))
    assert main(["report", str(tmp_path / output)]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before and (tmp_path / "afile").read_text() == "mine"
    with pytest.raises(ConfigError, match=r"in\.jsonl: is not a directory"):  # was "'in.jsonl' names no files"
        prepare(PrepareConfig(inputs, inputs[0], workers=1))


def test_an_empty_input_is_an_error_and_leaves_no_output(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(
        InputDataError,
        match=r"produced no documents: the 1 input file\(s\) \(0 bytes\) hold no "
        r"documents.*allow_empty=True \(--allow-empty\)",
    ):
        prepare(config(tmp_path, [str(empty)]))
    assert not (tmp_path / "out").exists()
    (tmp_path / "out").mkdir()  # a directory the user made is left, empty
    with pytest.raises(InputDataError, match="produced no documents"):
        prepare(config(tmp_path, [str(empty)]))
    assert os.listdir(tmp_path / "out") == []
    result = prepare(config(tmp_path, [str(empty)], allow_empty=True))
    assert result.documents == 0 and result.parts == ()


def test_a_step_that_removes_everything_warns_and_the_run_fails(tmp_path, caplog):
    pytest.importorskip("pycld2")
    path = corpus(tmp_path, [{"text": t} for t in ENGLISH])
    with (
        caplog.at_level(logging.WARNING, logger="tokenport"),
        pytest.raises(InputDataError, match=r"cleaning step 0:language removed every document it saw"),
    ):
        prepare(config(tmp_path, [path], steps=[{"step": "language", "languages": ["fr"]}]))
    assert "step 0:language removed all 2 documents it saw (other_language 2)" in caplog.text
    assert not (tmp_path / "out").exists()
    kept = prepare(config(tmp_path, [path], steps=[{"step": "language", "languages": ["en"]}]))  # fixed: runs
    assert kept.documents == 2


def test_cli_exits_nonzero_with_one_line_when_nothing_is_left(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["prepare", str(empty), "-o", str(tmp_path / "out"), "-q", "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "produced no documents" in err[0] and "--allow-empty" in err[0]
    assert main(["prepare", str(empty), "-o", str(tmp_path / "out"), "-q", "--workers", "1", "--allow-empty"]) == 0


# -- messages name the flags the user typed ---------------------------------------------------------


def test_a_wrong_text_key_lists_the_fields_that_exist_and_names_the_flag(tmp_path, capsys):
    path = corpus(tmp_path, [{"body": ENGLISH[0], "id": 1}])
    assert main(["prepare", path, "-o", str(tmp_path / "out"), "-q", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "has no 'text' field (or it is null; fields: 'body', 'id')" in err
    assert "set text_key / --text-key" in err and "(--on-error skip)" in err


def test_shard_tokens_without_shard_by_tokens_is_an_error(tmp_path, capsys):
    path = corpus(tmp_path, [{"text": ENGLISH[0]}])
    assert main(["prepare", path, "-o", str(tmp_path / "out"), "-q", "--shard-tokens", "1000"]) == 2
    assert "--shard-tokens sizes parts only with --shard-by tokens" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_config_messages_name_field_and_flag(tmp_path):
    with pytest.raises(
        ConfigError, match=r"PrepareConfig\.on_error='ignore' \(--on-error\): must be one of stop, skip"
    ):
        config(tmp_path, ["x.jsonl"], on_error="ignore")
    with pytest.raises(ConfigError, match=r"PrepareConfig\.allow_empty='yes' \(--allow-empty\)"):
        config(tmp_path, ["x.jsonl"], allow_empty="yes")


# -- parts --------------------------------------------------------------------------------------------


def test_a_directory_of_small_text_files_is_not_one_part_per_file(tmp_path):
    tree = tmp_path / "docs"
    tree.mkdir()
    for i in range(30):
        (tree / f"note{i:02d}.txt").write_text(f"{ENGLISH[i % 2]} ({i})")
    (tree / "z.jsonl").write_text(json.dumps({"text": ENGLISH[0]}) + "\n")  # a jsonl file keeps its own part
    result = prepare(config(tmp_path, [str(tree)], unit_bytes=1000))
    assert result.documents == 31 and len(result.parts) == 2
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    assert [len(part["inputs"]) for part in manifest["parts"]] == [30, 1]
    small = prepare(PrepareConfig([str(tree)], str(tmp_path / "small"), workers=1, shard_tokens=1000))
    assert len(small.parts) > 3 and small.documents == 31  # text files share parts of up to shard_tokens


def test_prepare_given_inputs_instead_of_a_config_shows_the_right_call(tmp_path):
    with pytest.raises(ConfigError, match=r"expected a PrepareConfig, got a list; call prepare\(PrepareConfig\("):
        prepare(["data/prose.jsonl"], "memory://b/x")
    with pytest.raises(ConfigError, match="got a str"):
        prepare(str(tmp_path / "in.jsonl"))
