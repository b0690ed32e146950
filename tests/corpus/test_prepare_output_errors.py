"""An OS error while prepare writes (disk full, a file in the way, no permission) names the output the user
gave and what to do, never only an internal .work/ or staging path, and never a traceback."""

from __future__ import annotations

import errno
import json
import resource
import signal
import subprocess
import sys

import pytest

from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.run.failures import output_failure
from tokenport.errors import StorageError


def corpus(tmp_path, lines: int = 3) -> str:
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i} " * 40}) + "\n" for i in range(lines)))
    return str(path)


def test_a_file_where_the_work_directory_goes_names_the_output_and_what_is_in_the_way(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".work").write_text("mine")
    with pytest.raises(StorageError) as refused:
        prepare(PrepareConfig(corpus(tmp_path), str(out), workers=1))
    message = str(refused.value)
    assert message.startswith(f"{out}: cannot write the prepared output: File exists (at {out / '.work'})")
    assert f"{out / '.work'} is in the way: remove it, or pass another -o/--output" in message
    assert (out / ".work").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == [".work"]


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_full_disk_names_the_output_with_no_traceback(tmp_path, workers):
    data = corpus(tmp_path, lines=600)  # about 300 kB of tokens: past the file-size limit
    command = [sys.executable, "-m", "tokenport", "prepare", data, "-o", "out", "-q", "--workers", workers]
    done = subprocess.run(command, cwd=tmp_path, preexec_fn=_small_files, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tokenport: error: out: cannot write the prepared output: File too large")
    assert "free space on the disk holding" in done.stderr and "another -o/--output" in done.stderr
    assert "Traceback" not in done.stderr and "unit-" not in done.stderr


def test_each_kind_of_os_error_says_what_to_do(tmp_path):
    out = str(tmp_path / "out")
    denied = output_failure(out, out, PermissionError(errno.EACCES, "Permission denied", f"{out}/.work/unit-1.bin"))
    assert str(denied) == (
        f"{out}: cannot write the prepared output: Permission denied (at {out}/.work/unit-1.bin); "
        f"make {out} writable by this user, or pass another -o/--output"
    )
    full = output_failure("s3://bucket/data", out, OSError(errno.ENOSPC, "No space left on device"))
    assert str(full).startswith("s3://bucket/data: cannot write the prepared output: No space left on device; free")
    assert output_failure(out, out, FileNotFoundError(errno.ENOENT, "gone", str(tmp_path / "input.jsonl"))) is None
