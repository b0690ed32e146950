"""Work people can watch: a compressed input is shared by many workers, and progress moves within a unit."""

from __future__ import annotations

import gzip
import json
import lzma
import pathlib

import pytest

from tokenport.errors import InputDataError
from tokenport.indexed import IndexedDataset
from tokenport.prepare import PrepareConfig, prepare

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
