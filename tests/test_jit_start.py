"""numba's start-up in a process that only runs tokenport kernels: no numba_extensions entry point is
loaded for them (they run before any other function is compiled), and the CPU target's BLAS probe
(an import of scipy.linalg.cython_blas) waits until numba asks for its answer, which is unchanged."""

from __future__ import annotations

import os
import subprocess
import sys

KERNEL = "import numpy as np; from tokenport.indexed.bounds_kernels import first_drop; first_drop(np.arange(3))"

EXTENSIONS = (
    "import sys; import tokenport; " + KERNEL + "\n"
    "import numba.core.entrypoints as e; print(e._already_initialized)\n"
    "import numba\n@numba.njit\ndef twice(x):\n    return 2 * x\n"
    "twice(1); print(e._already_initialized)"
)

PROBE = (
    "import sys\n" + KERNEL + "\n"
    "print('scipy.linalg.cython_blas' in sys.modules)\n"
    "import numba.np.arraymath as arraymath\n"
    "print(bool(arraymath._HAVE_BLAS), 'scipy.linalg.cython_blas' in sys.modules)"
)


def run(code: str, *path: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, *sys.path])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_tokenport_kernels_load_no_extension_and_another_functions_compile_loads_them():
    assert run(EXTENSIONS) == ["False", "True"]


def fake_scipy(root) -> str:
    """A scipy that numba takes as installed (version 1.17, LP64 BLAS), its cython_blas importable."""
    linalg = root / "scipy" / "linalg"
    linalg.mkdir(parents=True)
    (root / "scipy" / "__init__.py").write_text("__version__ = '1.17.0'\n")
    (linalg / "__init__.py").write_text("")
    (linalg / "cython_blas.py").write_text("")
    return str(root)


def test_the_blas_probe_waits_until_asked_and_answers_as_before(tmp_path):
    assert run(PROBE, fake_scipy(tmp_path)) == ["False", "True", "True"]


def test_without_tokenport_numba_probes_blas_at_its_first_kernel(tmp_path):
    """The probe the deferral avoids: numba alone imports cython_blas when its CPU target starts."""
    code = "import sys, numba\n@numba.njit\ndef one():\n    return 1\n"
    code += "one(); print('scipy.linalg.cython_blas' in sys.modules)"
    assert run(code, fake_scipy(tmp_path)) == ["True"]
