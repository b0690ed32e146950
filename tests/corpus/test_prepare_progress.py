"""Work people can watch: a compressed input is shared by many workers, and progress moves within a unit."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import pathlib

import pytest

from tokenport.corpus import PrepareConfig, prepare
from tokenport.errors import InputDataError
from tokenport.indexed import IndexedDataset

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def texts(count: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(20 + i % 40)) for i in range(count)]


def lines(items: list[str]) -> bytes:
    return "".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(items)).encode()


def stores(result) -> list[bytes]:
    return [pathlib.Path(p + s).read_bytes() for p in result.parts for s in (".bin", ".idx")]


def run(inputs, output, **options):
    return prepare(PrepareConfig([str(i) for i in inputs], str(output), **{"workers": 1, **options}))


@pytest.mark.parametrize("opener, suffix", [(gzip.open, ".jsonl.gz"), (lzma.open, ".jsonl.xz")])
def test_a_compressed_input_is_cut_into_units_with_the_same_output(tmp_path, opener, suffix):
    data = lines(texts(3000))
    plain = tmp_path / "corpus.jsonl"
    plain.write_bytes(data)
    packed = tmp_path / f"corpus{suffix}"
    with opener(packed, "wb") as f:
        f.write(data)
    assert packed.stat().st_size < 60_000 < len(data)  # one compressed unit of work before
    reference = run([plain], tmp_path / "plain", unit_bytes=60_000)
    one = run([packed], tmp_path / "one", unit_bytes=60_000)
    two = run([packed], tmp_path / "two", unit_bytes=60_000, workers=2)
    manifest = json.loads((tmp_path / "two" / "tokenport.json").read_text())
    assert manifest["totals"]["units"] >= len(data) // 60_000 and two.units == manifest["totals"]["units"]
    assert stores(one) == stores(two) == stores(reference)
    assert one.documents == 3000 and one.bytes_in == len(data)
    assert not (tmp_path / "two" / ".work").exists()


@pytest.mark.parametrize("opener, suffix", [(gzip.open, ".jsonl.gz"), (lzma.open, ".jsonl.xz")])
def test_a_well_compressed_input_is_shared_too(tmp_path, opener, suffix):
    """A file that inflates far more than 4x (repetitive jsonl) is still decompressed once into chunks
    for all workers: its compressed size says nothing about how many units it holds."""
    data = lines(texts(3000))
    packed = tmp_path / f"corpus{suffix}"
    with opener(packed, "wb") as f:
        f.write(data)
    unit_bytes = len(data) // 4
    assert packed.stat().st_size * 4 < unit_bytes  # one unit of work under the 4x guess
    two = run([packed], tmp_path / "two", unit_bytes=unit_bytes, workers=2)
    assert two.units >= 4
    (tmp_path / "corpus.jsonl").write_bytes(data)
    assert stores(two) == stores(run([tmp_path / "corpus.jsonl"], tmp_path / "plain", unit_bytes=unit_bytes))


def test_a_small_compressed_input_is_read_whole(tmp_path):
    """Below unit_bytes / 16 compressed, a file is one unit read by its worker: no decompression at planning."""
    from tokenport.corpus.inputs.sources import expand_inputs
    from tokenport.corpus.run.units import plan_units

    path = tmp_path / "small.jsonl.gz"
    path.write_bytes(gzip.compress(lines(texts(300))))
    [unit] = plan_units(expand_inputs([str(path)], exclude=str(tmp_path / "out")), 64 << 20, str(tmp_path / "inflated"))
    assert [s.inflated for s in unit.slices] == [None] and not (tmp_path / "inflated").exists()


def test_a_compressed_input_reports_true_line_numbers(tmp_path):
    rows = lines(texts(3000)).splitlines(keepends=True)
    rows[2990] = b'{"text": 5}\n'
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(rows)))
    with pytest.raises(InputDataError, match=r"corpus\.jsonl\.gz: line 2991: field 'text' is a JSON int"):
        run([path], tmp_path / "out", unit_bytes=30_000)


def test_a_truncated_compressed_input_keeps_what_it_can_and_reports_the_break(tmp_path):
    data = gzip.compress(lines(texts(3000)))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(InputDataError, match=r"cut\.jsonl\.gz: after line \d+: cannot be decompressed"):
        run([path], tmp_path / "out", unit_bytes=30_000)
    result = run([path], tmp_path / "skip", unit_bytes=30_000, on_error="skip")
    assert result.skipped == {"corrupt_input": 1} and 1000 < result.documents < 3000
    with IndexedDataset(result.parts[0]) as ds:
        assert len(ds) == result.documents


def _zstd_frames(data):
    """zstd frames of about 20,000 bytes each (as pzstd or a chunked writer makes them)."""
    zstandard = pytest.importorskip("zstandard")
    return b"".join(zstandard.ZstdCompressor().compress(data[i : i + 20_000]) for i in range(0, len(data), 20_000))


@pytest.mark.parametrize(
    "compress", [gzip.compress, bz2.compress, lzma.compress, _zstd_frames], ids=["gz", "bz2", "xz", "zst"]
)
@pytest.mark.parametrize("cut", [0.1, 0.5, 0.99])
def test_a_compressed_input_cut_anywhere_is_refused_not_read_short(tmp_path, compress, cut):
    """A zstd stream cut inside a frame used to end quietly with the frames before it: a short corpus."""
    data = compress(lines(texts(3000)))
    path = tmp_path / "cut.jsonl.x"
    path.write_bytes(data[: int(len(data) * cut)])
    suffix = {"gzip": ".gz", "bz2": ".bz2", "lzma": ".xz"}.get(compress.__module__, ".zst")
    path = path.rename(path.with_suffix(suffix))
    for unit_bytes in (30_000, 10**9):  # decompressed once into chunks, or read whole as one unit
        with pytest.raises(InputDataError, match=r"cut\.jsonl\.[a-z0-9]+: after line \d+: cannot be decompressed"):
            run([path], tmp_path / f"out{unit_bytes}", unit_bytes=unit_bytes)
        assert not (tmp_path / f"out{unit_bytes}" / "tokenport.json").exists()


def units_of(tmp_path, unit_bytes):
    from tokenport.corpus.inputs.sources import expand_inputs
    from tokenport.corpus.run.units import plan_units

    path = tmp_path / "corpus.jsonl"
    path.write_bytes(lines(texts(3000)))
    return plan_units(expand_inputs([str(path)], exclude=str(tmp_path / "out")), unit_bytes)


def job(tmp_path):
    from tokenport.corpus.run.worker import UnitJob

    (tmp_path / "work").mkdir(exist_ok=True)
    return UnitJob(
        work_dir=str(tmp_path / "work"),
        text_key="text",
        append_eod=True,
        max_chars_per_piece=100_000,
        batch_size=16,
        on_error="stop",
    )


def test_progress_moves_within_a_unit(tmp_path, monkeypatch):
    from tokenport.corpus.run import worker
    from tokenport.corpus.run.executor import LocalExecutor
    from tokenport.tokenizers import load_tokenizer

    monkeypatch.setattr(worker._Meter, "_EVERY", 0.0)  # report after every batch of 16 documents
    (unit,) = units_of(tmp_path, 1 << 30)
    reports, done = [], []
    with LocalExecutor(load_tokenizer("byte"), 1) as executor:
        executor.run(
            job(tmp_path), [unit], lambda u, record: done.append(reports[:]), lambda u, more: reports.append(more)
        )
    assert len(done[0]) > 100 and sum(done[0]) == unit.size  # many steps, all of it before the unit ends
    assert all(more > 0 for more in reports)


def test_worker_processes_report_progress_over_their_pipe(tmp_path):
    from collections import Counter

    from tokenport.corpus.run.executor import LocalExecutor
    from tokenport.tokenizers import load_tokenizer

    units = units_of(tmp_path, 40_000)
    shown, finished = Counter(), []
    with LocalExecutor(load_tokenizer("byte"), 2) as executor:
        executor.run(
            job(tmp_path),
            units,
            lambda u, record: finished.append(shown[u.name] == u.size),
            lambda u, more: shown.update({u.name: more}),
        )
    assert len(finished) == len(units) > 3 and all(finished)  # each unit's progress, all of it, before its record


def test_a_run_with_a_progress_bar_ends_full(tmp_path, capsys):
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(gzip.compress(lines(texts(3000))))
    result = prepare(PrepareConfig([str(path)], str(tmp_path / "out"), workers=2, unit_bytes=60_000), progress=True)
    err = capsys.readouterr().err
    assert result.documents == 3000 and "prepare: 100%" in err and "decompress corpus.jsonl.gz" in err


def test_the_dedup_key_pass_shows_progress_too(tmp_path, capsys):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(lines(texts(3000) * 2))
    result = prepare(
        PrepareConfig(
            [str(path)], str(tmp_path / "out"), workers=2, unit_bytes=60_000, steps=[{"step": "exact_dedup"}]
        ),
        progress=True,
    )
    assert result.documents == len(set(texts(3000)))
    assert "dedup step 0: keys: 100%" in capsys.readouterr().err
