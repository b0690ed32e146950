"""`tokenport blend`: per-dataset shares, samples, epochs and prefix deviations, and the plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.builder.report import blend_report
from tokenport.cli import main


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, str]:
    """Three stores of different token counts."""
    directory = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(0)
    prefixes = {}
    for name, documents in (("web", 300), ("code", 80), ("books", 20)):
        drawn = random_documents(rng, documents, tokens=(3, 1000), length=(10, 200))
        prefixes[name] = build_store(directory / name, drawn, dtype=np.uint16)
    return prefixes


def test_report_rows_add_up(stores):
    spec = tp.BlendSpec(blend=tp.Blend((stores["web"], stores["code"], stores["books"]), (6.0, 3.0, 1.0)))
    (report,) = blend_report(spec, 10_007, seq_length=64)
    assert sum(row.samples for row in report.rows) == 10_007
    tokens = [tp.IndexedDataset(p).num_tokens for p in (stores["web"], stores["code"], stores["books"])]
    for row, target, count in zip(report.rows, (0.6, 0.3, 0.1), tokens):
        assert row.target == pytest.approx(target) and row.achieved == row.samples / 10_007
        assert abs(row.samples - 10_007 * target) < 1 and row.epochs == pytest.approx(row.samples * 64 / count)
    assert report.max_deviation <= report.bound == pytest.approx(0.75)
    assert "largest prefix deviation" in report.render() and "books" in report.render()


def test_by_size_blends_weigh_by_tokens(stores):
    spec = tp.BlendSpec(blend=tp.Blend((stores["web"], stores["books"])))
    (report,) = blend_report(spec, 5_000, seq_length=64)
    tokens = np.array([tp.IndexedDataset(stores[n]).num_tokens for n in ("web", "books")], dtype=np.float64)
    assert [row.target for row in report.rows] == pytest.approx((tokens / tokens.sum()).tolist())


def test_cli_with_megatron_list_spec_file_and_plot(stores, tmp_path, capsys):
    assert main(["blend", "0.7", stores["web"], "0.3", stores["code"], "--size", "1000", "--seq-length", "32"]) == 0
    out = capsys.readouterr().out
    assert "1,000 samples of 32 tokens" in out and "700" in out and "300" in out
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "train": [{"path": stores["web"], "weight": 1}, {"path": stores["books"], "weight": 1}],
                "valid": [{"path": stores["code"], "weight": 1}],
            }
        )
    )
    plot = tmp_path / "blend.png"
    assert main(["blend", str(spec), "--size", "500", "--algorithm", "megatron", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert out.count("algorithm megatron") == 2 and "train:" in out and "valid:" in out
    pytest.importorskip("matplotlib")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("size", [0, -5])
def test_bad_size(stores, size, capsys):
    assert main(["blend", "1", stores["web"], "--size", str(size)]) == 2
    assert "size" in capsys.readouterr().err


def test_the_table_names_datasets_by_spec_name_or_short_suffix_and_the_json_keeps_paths(stores, tmp_path, capsys):
    spec = tmp_path / "spec.json"
    deep = {"name": "code and its long neighbour", "path": stores["code"], "weight": 1}
    spec.write_text(json.dumps({"blend": [{"name": "web", "path": stores["web"], "weight": 3}, deep]}))
    assert main(["blend", str(spec), "--size", "100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in lines[2:4]] == ["web", "code and its long neighbour"]
    assert all(len(line) <= 100 for line in lines) and not any(stores["web"] in line for line in lines)
    assert main(["blend", "1", stores["web"], "1", stores["books"], "--size", "100"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:4]
    assert [row.split()[0] for row in rows] == ["web", "books"]  # no name: the shortest distinguishing suffix
    assert main(["blend", str(spec), "--size", "100", "--json"]) == 0
    (blend,) = json.loads(capsys.readouterr().out)["blends"]
    assert [(row["prefix"], row["label"]) for row in blend["rows"]] == [
        (stores["web"], "web"),
        (stores["code"], "code and its long neighbour"),
    ]
