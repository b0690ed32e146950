"""TransferQueue's own client-level tests, as its wheel ships them, run against tokenport's adapter.

The wheel installs them as a top-level ``tests`` package in site-packages; they are not copied here.
A pytest subprocess collects them from there (its own root, so their ``tests`` never meets ours)
with the plugin ``tq_swap`` (``import transfer_queue`` gives the adapter), connected to this
session's Ray. Every test's outcome is checked against the lists below, by node id: the tests that
read TransferQueue's controller internals are deselected, each with its reason; the two the peer
skips itself (CUDA) must be skipped; every other collected test must pass, and the set of tests
that ran must be exactly the expected one.

Counts: the kv file 40 of 56 run and pass (16 read the controller's partition snapshot); the lifecycle
file 8 of 10 pass (2 CUDA skips); the checkpoint file 6 of 14 run and pass (8 read TransferQueue's
checkpoint layout, its controller's snapshot or module globals, or mock its client's storage dump).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensordict")
transfer_queue = pytest.importorskip("transfer_queue")

HERE = Path(__file__).resolve().parent
PEER_TESTS = Path(transfer_queue.__file__).resolve().parent.parent / "tests"
KV = "e2e/test_kv_interface_e2e.py"
LIFECYCLE = "e2e/test_e2e_lifecycle_consistency.py"
CHECKPOINT = "e2e/test_checkpoint_e2e.py"
MODES = ("sync", "async")

_SNAPSHOT = "reads TransferQueueController.get_partition_snapshot (keys_mapping, field_name_mapping, the "
# each deselected test, with why it is outside the client API
CONTROLLER_INTERNALS = {
    f"{KV}::TestKVPutE2E::test_kv_put_single_sample_with_fields_and_tag": _SNAPSHOT + "production_status matrix)",
    f"{KV}::TestKVPutE2E::test_kv_put_update_tag_only": _SNAPSHOT + "per-index custom_meta)",
    f"{KV}::TestKVPutE2E::test_kv_put_partial_update": _SNAPSHOT + "production_status matrix)",
    f"{KV}::TestKVBatchPutE2E::test_kv_batch_put_multiple_samples": _SNAPSHOT + "per-index custom_meta)",
    f"{KV}::TestKVBatchPutE2E::test_kv_batch_put_partial_update": _SNAPSHOT + "production_status matrix)",
    f"{KV}::TestKVClearE2E::test_kv_clear_single_key": _SNAPSHOT + "keys_mapping after a clear)",
    f"{KV}::TestKVClearE2E::test_kv_clear_idempotent": _SNAPSHOT + "keys_mapping after a clear)",
    f"{KV}::TestKVE2ECornerCases::test_field_expansion_across_samples": _SNAPSHOT + "production_status matrix)",
}
# the checkpoint file's tests that read TransferQueue's internals, each with why
_LAYOUT = "reads TransferQueue's own checkpoint layout ("
CHECKPOINT_INTERNALS = {
    f"{CHECKPOINT}::TestCheckpointRoundtrip::test_tensor_fields": _LAYOUT
    + "controller_state.pkl, simple_storage/storage_unit_info.json); the adapter writes transferqueue.json and dock/",
    f"{CHECKPOINT}::TestCheckpointRoundtrip::test_controller_metadata": "reads "
    + "TransferQueueController.get_partition_snapshot (keys_mapping, custom_meta)",
    f"{CHECKPOINT}::TestIncludeStorageFalse::test_storage_saved_is_true": _LAYOUT + "a simple_storage/ directory)",
    f"{CHECKPOINT}::TestIncludeStorageFalse::test_both_restored_after_load": "reads "
    + "TransferQueueController.get_partition_snapshot (keys_mapping)",
    f"{CHECKPOINT}::TestCheckpointErrors::test_save_raises_if_not_initialized": "sets transfer_queue.interface."
    + "_TQ_CONTROLLER to None (the adapter's own not-initialized RuntimeError is tested in our suite)",
    f"{CHECKPOINT}::TestCheckpointErrors::test_load_raises_if_not_initialized": "sets transfer_queue.interface."
    + "_TQ_CONTROLLER to None (the adapter's own not-initialized RuntimeError is tested in our suite)",
    f"{CHECKPOINT}::TestCheckpointErrors::test_load_raises_on_storage_unit_count_mismatch": _LAYOUT
    + "it tampers with simple_storage/storage_unit_info.json, SimpleStorage's unit count)",
    f"{CHECKPOINT}::TestCheckpointErrors::test_no_partial_state_on_failed_save": "mocks "
    + "TransferQueueClient.save_storage_checkpoint, which the adapter never calls (our kill tests cover failed saves)",
}
# skipped by the peer itself: they need CUDA and TransferQueue's MooncakeStore_GDR storage backend
PEER_SKIPS = {
    f"{LIFECYCLE}::test_gdr_gpu_tensor_roundtrip": "CUDA and the MooncakeStore_GDR backend",
    f"{LIFECYCLE}::test_gdr_cpu_tensor_roundtrip": "CUDA and the MooncakeStore_GDR backend",
}
FILES = (KV, LIFECYCLE, CHECKPOINT)


def _ids(names: dict[str, str]) -> set[str]:
    """The node ids of ``names`` (parametrized sync/async in the kv file)."""
    return {f"{name}[{mode}]" if name.startswith(KV) else name for name in names for mode in MODES}


def test_transferqueue_own_tests_pass_against_the_adapter(ray_session, tmp_path):
    report = tmp_path / "outcomes.json"
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n")
    env = dict(os.environ, RAY_ADDRESS=ray_session.get_runtime_context().gcs_address, TQ_SWAP_REPORT=str(report))
    env.update(TQ_TEST_BACKEND="SimpleStorage", PYTHONDONTWRITEBYTECODE="1")  # the peer's default; no .pyc written
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *sys.path[1:]])
    left_out = _ids(CONTROLLER_INTERNALS) | set(CHECKPOINT_INTERNALS)
    deselect = [arg for name in sorted(left_out) for arg in ("--deselect", name)]
    command = [sys.executable, "-m", "pytest", "-p", "tq_swap", "-p", "no:cacheprovider", "-q", "-c", str(ini),
               f"--rootdir={PEER_TESTS}", *deselect, *FILES]  # fmt: skip
    run = subprocess.run(command, cwd=PEER_TESTS, env=env, capture_output=True, text=True, timeout=900)
    assert report.exists(), run.stdout[-4000:] + run.stderr[-4000:]
    written = json.loads(report.read_text())
    outcomes, errors = written["outcomes"], written["errors"]
    ran = set(outcomes)
    assert not ran & left_out, "a deselected test ran"
    wrong = {
        name: outcome
        for name, outcome in outcomes.items()
        if outcome != ("skipped" if name in PEER_SKIPS else "passed")
    }
    assert not wrong, f"unexpected outcomes: {wrong}\n{errors}"
    assert len(ran) == EXPECTED_RUN, sorted(ran)  # never vacuous: every collected peer test ran
    assert len(ran - set(PEER_SKIPS)) == EXPECTED_PASSED


# the kv file: 28 tests x sync/async, less the deselected; the lifecycle file: 10 tests; the checkpoint
# file: 14 tests, less the deselected
EXPECTED_RUN = 56 - 2 * len(CONTROLLER_INTERNALS) + 10 + 14 - len(CHECKPOINT_INTERNALS)
EXPECTED_PASSED = EXPECTED_RUN - len(PEER_SKIPS)
