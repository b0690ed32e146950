"""rebuild knows tokenport's own dataset kinds from their exports alone, in a process that imported none."""

from __future__ import annotations

import json
import subprocess
import sys


def test_rebuild_knows_every_own_kind_in_a_fresh_process():
    code = (
        "import json\n"
        "from tokenport.integrations import rebuild\n"
        "from tokenport.samples.base import DATASET_KINDS\n"
        "before = sorted(DATASET_KINDS)\n"
        "rebuild._import_own_kinds()\n"
        "print(json.dumps([before, sorted(DATASET_KINDS)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout)
    assert "AdaptiveBlend" not in before  # the blend's module was not imported by rebuild's own imports
    assert after == ["AdaptiveBlend", "BlendedDataset", "GPTDataset", "PackedDataset", "SFTDataset"]
