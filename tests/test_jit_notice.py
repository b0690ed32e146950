"""A first run that must compile numba kernels says so; a run that finds them cached says nothing."""

from __future__ import annotations

import os
import subprocess
import sys

KERNEL = "import numba\n\n@numba.njit(cache=True)\ndef twice(x):\n    return 2 * x\n"

RUN = (
    "import logging, sys; logging.basicConfig(format='%(message)s'); sys.path.insert(0, sys.argv[1]); "
    "import kernels; from tokenport._jit import announce_compilation; "
    "print(announce_compilation(['kernels', 'tokenport.corpus.run.config']), announce_compilation(['kernels'])); "
    "kernels.twice(21)"
)


def run(directory, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env}
    return subprocess.run(
        [sys.executable, "-c", RUN, str(directory)], env=environment, capture_output=True, text=True, check=True
    )


def test_cold_kernels_are_announced_once_and_cached_ones_not(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNEL)
    first = run(tmp_path)
    assert first.stdout.strip() == "['kernels'] []"  # a module without kernels is never named; once per process
    assert "first run: compiling numba kernels of kernels" in first.stderr
    second = run(tmp_path)
    assert second.stdout.strip() == "[] []" and "compiling" not in second.stderr


def test_the_cache_numba_uses_is_the_one_checked(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNEL)
    run(tmp_path)  # cached beside the module
    elsewhere = run(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "cache"))  # numba now looks only here: cold
    assert "first run: compiling numba kernels of kernels" in elsewhere.stderr


def test_pack_report_names_the_kernels_it_compiles_and_only_those(tmp_path):
    import numpy as np

    from tokenport.indexed import IndexedDatasetWriter

    with IndexedDatasetWriter(str(tmp_path / "store"), dtype=np.uint16) as writer:
        for length in range(1, 200):
            writer.add_document(np.arange(length, dtype=np.uint16))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "tokenport", "pack-report", str(tmp_path / "store")]
    first = subprocess.run(command, env=environment, capture_output=True, text=True, check=True)
    assert "first run: compiling numba kernels of packing.balance, packing.bins" in first.stderr
    again = subprocess.run(command, env=environment, capture_output=True, text=True, check=True)
    assert "compiling" not in again.stderr and again.stdout == first.stdout  # a warm cache: no false notice


def test_a_module_that_cannot_be_imported_by_name_is_skipped():
    from tokenport._jit import announce_compilation

    assert announce_compilation(["__notebook_cell__", "tokenport.corpus.run.config"]) == []
