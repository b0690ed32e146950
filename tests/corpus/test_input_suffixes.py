"""Inputs of a suffix prepare does not read (.csv, .pdf...) are refused before any work, saying what to
do, never read silently as one text document; --as-text reads them as text when that is what is meant."""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.inputs.sources import detect_format, expand_inputs
from tokenport.errors import InputDataError

CSV = "text,label\nhello world,1\nsecond row,0\n"


def run(inputs, output, **options) -> object:
    return prepare(PrepareConfig.from_options(inputs, str(output), workers=1, **options))


def test_a_csv_is_refused_before_any_work_with_the_conversion_and_the_flag(tmp_path):
    (tmp_path / "data.csv").write_text(CSV)
    with pytest.raises(InputDataError) as refused:
        run(str(tmp_path / "data.csv"), tmp_path / "out")
    message = str(refused.value)
    assert f"{tmp_path / 'data.csv'}: prepare does not read .csv files" in message
    assert "csv.DictReader(sys.stdin)" in message and "< data.csv > data.jsonl" in message
    assert "--text-key COLUMN" in message and "--as-text" in message
    assert not (tmp_path / "out").exists()


def test_other_suffixes_and_compressed_ones_are_refused_too(tmp_path):
    for name in ("book.pdf", "sheet.xlsx", "page.html", "rows.csv.gz", "rows.tsv"):
        with pytest.raises(InputDataError, match=rf"{name}: prepare does not read \.\w+ files"):
            detect_format(str(tmp_path / name))
    with pytest.raises(InputDataError, match=r"chr\(9\)"):  # a tsv's conversion splits at tabs
        detect_format("rows.tsv")
    with pytest.raises(InputDataError, match=r"decompress it to Rows\.CSV, then .* < Rows\.CSV > Rows\.jsonl"):
        detect_format("Rows.CSV.gz")


def test_text_suffixes_and_no_suffix_stay_text(tmp_path):
    for name in ("a.txt", "b.md", "c.rst", "d.py", "e.c", "LICENSE", "notes.txt.gz", "f.text", "g.yaml"):
        assert detect_format(name)[0] == "text", name
    assert detect_format("x.jsonl.zst") == ("jsonl", "zstd") and detect_format("x.parquet") == ("parquet", None)
    assert detect_format("data.csv", as_text=True) == ("text", None)


def test_a_directory_with_files_of_unread_suffixes_is_refused_naming_one_and_counting_the_rest(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("kept text")
    (folder / "b.csv").write_text(CSV)
    (folder / "c.pdf").write_bytes(b"%PDF-1.4")
    with pytest.raises(InputDataError) as refused:
        run(str(folder), tmp_path / "out")
    message = str(refused.value)
    assert f"{folder / 'b.csv'} (and 1 more such file): prepare does not read .csv files" in message
    assert f"'{folder}/**/*.jsonl'" in message
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputDataError, match=r"pattern narrower than '.*corpus/\*'"):
        expand_inputs([str(folder / "*")], exclude=str(tmp_path / "out"))
    assert [f.format for f in expand_inputs([str(folder / "*.txt")], exclude=str(tmp_path / "out"))] == ["text"]


def test_as_text_reads_them_as_before_and_the_manifest_says_so(tmp_path):
    (tmp_path / "data.csv").write_text(CSV)
    (tmp_path / "notes.txt").write_text(CSV)
    forced = run(str(tmp_path / "data.csv"), tmp_path / "forced", as_text=True)
    plain = run(str(tmp_path / "notes.txt"), tmp_path / "plain")
    assert forced.documents == plain.documents == 1 and forced.tokens == plain.tokens
    for name in ("part-00000.bin", "part-00000.idx"):
        assert (tmp_path / "forced" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
    assert json.loads((tmp_path / "forced" / "tokenport.json").read_text())["config"]["as_text"] is True
    assert "as_text" not in json.loads((tmp_path / "plain" / "tokenport.json").read_text())["config"]


def test_the_cli_flag_reads_a_csv_as_text(tmp_path, capsys):
    from tokenport.cli import main

    data = pathlib.Path(tmp_path / "data.csv.gz")
    data.write_bytes(gzip.compress(CSV.encode()))
    out = str(tmp_path / "out")
    assert main(["prepare", str(data), "-o", out, "-q", "--workers", "1"]) != 0
    assert "prepare does not read .csv files" in capsys.readouterr().err
    assert main(["prepare", str(data), "-o", out, "-q", "--workers", "1", "--as-text"]) == 0


def test_an_object_store_prefix_with_a_csv_is_refused_naming_its_url(s3, tmp_path, monkeypatch):
    s3fs = pytest.importorskip("s3fs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        s3.put(b'{"text": "kept"}\n', key="suffixes/a.jsonl")
        url = s3.put(CSV.encode(), key="suffixes/b.csv")
        refused = rf"{url}: prepare does not read \.csv files.*suffixes/\*\*/\*\.jsonl"
        with pytest.raises(InputDataError, match=refused):
            expand_inputs([f"s3://{s3.bucket}/suffixes/"], exclude=str(tmp_path / "out"))
        assert [f.format for f in expand_inputs([f"s3://{s3.bucket}/suffixes/a.jsonl"], str(tmp_path))] == ["jsonl"]
    finally:
        s3fs.S3FileSystem.clear_instance_cache()  # no later test meets this endpoint's cached instance
