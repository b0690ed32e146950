"""Small inputs keep every worker busy: below SPLIT_UNITS units of `unit_bytes`, inputs are cut into
finer units (never under MIN_UNIT_BYTES), planned from the inputs alone, so one worker and two give
the same units, the same store bytes and the same report; and a run whose units are all done does
not wait for a worker still starting."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from tests._support.startup import Rendezvous, gated
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.inputs.sources import expand_inputs
from tokenport.corpus.run.units import MIN_UNIT_BYTES, SPLIT_UNITS, plan_units, unit_size
from tokenport.corpus.steps.registry import register_step
from tokenport.indexed import IndexedDataset
from tokenport.tokenizers import register_tokenizer


def corpus(path: pathlib.Path, megabytes: float) -> pathlib.Path:
    """A jsonl file of about `megabytes` MB: distinct documents of about 1 kB."""
    line = "The river rose overnight and the bridge was closed until morning. " * 15
    count = int(megabytes * 1_000_000) // (len(line) + 30)
    path.write_text("".join(json.dumps({"text": f"{i} {line}"}) + "\n" for i in range(count)))
    return path


def stores(out: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*")) if p.suffix in (".bin", ".idx")}


def test_an_input_of_a_few_units_is_cut_finer_but_never_below_the_minimum(tmp_path):
    files = expand_inputs([str(corpus(tmp_path / "a.jsonl", 3.2))], exclude=str(tmp_path / "out"))
    total = files[0].size
    units = plan_units(files, 16 << 20)
    assert unit_size(files, 16 << 20) == max(MIN_UNIT_BYTES, -(-total // SPLIT_UNITS))
    assert len(units) == 3 and sum(u.size for u in units) == total
    assert [s.first for u in units for s in u.slices][0] == 0  # line-aligned ranges, counted lines
    assert unit_size(files, 1000) == 1000  # a configured unit smaller than the split is kept
    small = expand_inputs([str(corpus(tmp_path / "b.jsonl", 0.5))], exclude=str(tmp_path / "out"))
    assert len(plan_units(small, 16 << 20)) == 1  # under the minimum: one unit, as before
    big = [files[0]] * (SPLIT_UNITS * 16)  # many units' worth: the configured size
    assert unit_size(big, 1 << 20) == 1 << 20


def test_two_workers_both_get_work_below_the_unit_size_and_the_bytes_equal_one_workers(tmp_path):
    register_step("rendezvous", Rendezvous)
    path = corpus(tmp_path / "a.jsonl", 2.5)
    assert path.stat().st_size < 16 << 20  # one unit before the split
    met = tmp_path / "pids"
    met.mkdir()
    two = prepare(
        PrepareConfig(
            [str(path)], str(tmp_path / "two"), workers=2, steps=[{"step": "rendezvous", "directory": str(met)}]
        )
    )
    assert len(os.listdir(met)) == 2  # each process held its first document until the other had one
    alone = tmp_path / "alone"
    alone.mkdir()
    one = prepare(
        PrepareConfig(
            [str(path)],
            str(tmp_path / "one"),
            workers=1,
            steps=[{"step": "rendezvous", "directory": str(alone), "expect": 1}],
        )
    )
    assert two.units == one.units == 2
    assert (two.documents, two.tokens, two.bytes_in) == (one.documents, one.tokens, one.bytes_in)
    assert stores(tmp_path / "two") == stores(tmp_path / "one")
    finer = prepare(PrepareConfig([str(path)], str(tmp_path / "finer"), workers=1, unit_bytes=300_000))
    assert finer.units > 2 and stores(tmp_path / "finer") == stores(tmp_path / "one")  # as any plan gives


def test_a_run_whose_units_are_done_does_not_wait_for_a_worker_still_starting(tmp_path):
    register_tokenizer("gated", gated)
    gate = tmp_path / "gate"
    gate.mkdir()
    path = corpus(tmp_path / "a.jsonl", 0.1)  # one unit: this process takes it at once
    spec = f"gated:{gate}#{os.getpid()}"  # worker processes start once gate/open exists
    result = prepare(PrepareConfig([str(path)], str(tmp_path / "out"), workers=2, tokenizer=spec))
    assert result.units == 1 and result.documents > 0
    assert not (gate / "timed-out").exists()  # returned (and stopped the worker) before its start was over
    (gate / "open").touch()


def test_a_plain_prepare_runs_no_numba_kernel_in_the_calling_process(tmp_path):
    """Assembling copies whole sequences by slices: numba's CPU target (set up by a process's first
    kernel call, which imports numba.np.arraymath) is never started by a run without steps."""
    path = corpus(tmp_path / "a.jsonl", 0.2)
    code = (
        "import sys; from tokenport.corpus import PrepareConfig, prepare; "
        f"prepare(PrepareConfig([{str(path)!r}], {str(tmp_path / 'out')!r}, workers=1, unit_bytes=50_000)); "
        "print('numba.np.arraymath' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    with IndexedDataset(str(tmp_path / "out" / "part-00000")) as ds:  # the copy kept every document whole
        assert len(ds) == sum(1 for _ in path.open()) and ds.num_tokens > 0
