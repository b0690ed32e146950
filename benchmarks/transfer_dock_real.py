"""The real MindSpeed-RL ``GRPOTransferDock`` Ray actor, loaded from a clone of its sources.

The files are read with ``git show`` from a MindSpeed-RL repository (``$MINDSPEED_RL``, default
the fetched mirror /work/.mirror/Ascend+MindSpeed-RL/repo) and written, unchanged, into a scratch
package: ``trainer/utils/transfer_dock.py`` (the actor), ``utils/pad_process.py`` (its padding
helpers), ``utils/utils.py`` and ``utils/loggers.py`` (what those import). The package's
``__init__`` files are left empty (the real ones import the whole trainer stack), and the one
module that cannot load on a CPU machine, ``torch_npu``, is replaced by a stand-in whose only use
here, ``torch_npu.npu.mstx.range_start/range_end`` (profiler range markers around the padding
helpers), does nothing. Ray workers find the package through ``PYTHONPATH``, so call ``load()``
before ``ray.init``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

FILES = (
    "mindspeed_rl/trainer/utils/transfer_dock.py",
    "mindspeed_rl/utils/pad_process.py",
    "mindspeed_rl/utils/utils.py",
    "mindspeed_rl/utils/loggers.py",
)
PACKAGES = ("mindspeed_rl", "mindspeed_rl/utils", "mindspeed_rl/trainer", "mindspeed_rl/trainer/utils")
TORCH_NPU = '''"""Stand-in for torch_npu on CPU: the profiler range markers MindSpeed-RL's padding helpers call."""
import types

def _range_start(message, *args, **kwargs):
    return 0

def _range_end(range_id, *args, **kwargs):
    return None

npu = types.SimpleNamespace(mstx=types.SimpleNamespace(range_start=_range_start, range_end=_range_end))
'''


def load(repository: str | None = None):
    """Write the scratch package, put it on ``sys.path`` and ``PYTHONPATH``; return (the
    ``GRPOTransferDock`` actor class, the ``padding_dict_to_tensor_dict`` helper, the commit)."""
    repository = repository or os.environ.get("MINDSPEED_RL", "/work/.mirror/Ascend+MindSpeed-RL/repo")
    root = Path(tempfile.mkdtemp(prefix="mindspeed-rl-"))
    for package in PACKAGES:
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    for path in FILES:
        source = subprocess.run(
            ["git", "--git-dir", repository, "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
        ).stdout
        (root / path).write_text(source)
    (root / "torch_npu.py").write_text(TORCH_NPU)
    commit = subprocess.run(
        ["git", "--git-dir", repository, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    from mindspeed_rl.trainer.utils.transfer_dock import GRPOTransferDock
    from mindspeed_rl.utils.pad_process import padding_dict_to_tensor_dict

    return GRPOTransferDock, padding_dict_to_tensor_dict, commit
