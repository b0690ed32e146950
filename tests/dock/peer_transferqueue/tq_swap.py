"""A pytest plugin (``-p tq_swap``) under which TransferQueue's own tests run against tokenport's adapter.

``import transfer_queue`` gives a facade: the real package's names (``BatchMeta``, ``KVBatchMeta``,
samplers, submodules) with its client calls (``init``, ``close``, ``get_client``, ``kv_*``,
``async_kv_*``, the streaming loader) taken from ``tokenport.dock.transferqueue``. Ray workers of the
run install the same facade (``worker_process_setup_hook``), so ``tq.init()`` in a peer's remote task
joins the adapter's controller. The run connects to the Ray cluster at ``RAY_ADDRESS`` (the test
session's), and reconnects after a peer module's fixture shuts its connection down. Each test's
outcome (by node id) and failure message are written as JSON to ``TQ_SWAP_REPORT``.
"""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

_FACADE = "__tokenport_facade__"


def install() -> None:
    """Make ``transfer_queue`` the facade in this process (idempotent)."""
    real = sys.modules.get("transfer_queue")
    if real is not None and getattr(real, _FACADE, False):
        return
    import transfer_queue as real  # the real package and its submodules, loaded first

    import tokenport.dock.transferqueue as adapter
    from tokenport.dock import transferqueue_loader

    facade = types.ModuleType("transfer_queue", adapter.__doc__)
    facade.__dict__.update({k: v for k, v in vars(real).items() if k not in ("__name__", "__doc__", "__loader__")})
    for name in (
        "init", "close", "get_client", "kv_put", "kv_batch_put", "kv_batch_get", "kv_batch_get_by_meta",
        "kv_list", "kv_clear", "async_kv_put", "async_kv_batch_put", "async_kv_batch_get",
        "async_kv_batch_get_by_meta", "async_kv_list", "async_kv_clear", "TransferQueueClient",
        "save_checkpoint", "load_checkpoint",
    ):  # fmt: skip
        setattr(facade, name, getattr(adapter, name))
    facade.StreamingDataset = transferqueue_loader.StreamingDataset
    facade.StreamingDataLoader = transferqueue_loader.StreamingDataLoader
    setattr(facade, _FACADE, True)
    sys.modules["transfer_queue"] = facade


def pytest_configure(config: pytest.Config) -> None:
    install()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Connect to the session's Ray (with the facade in its workers) before a peer fixture would start one."""
    import ray

    if ray.is_initialized():
        return
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join([here, *sys.path[1:]])
    ray.init(
        address=os.environ["RAY_ADDRESS"],
        namespace="tokenport-peer-transferqueue",
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"worker_process_setup_hook": "tq_swap.install", "env_vars": {"PYTHONPATH": path}},
    )


_OUTCOMES: dict[str, str] = {}
_ERRORS: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A test's outcome: its call's, or "error"/"skipped" when its setup did not pass; and why it failed."""
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _OUTCOMES[report.nodeid] = report.outcome if report.when == "call" or report.skipped else "error"
    elif report.when == "teardown" and report.failed:
        _OUTCOMES[report.nodeid] = "error"
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        _ERRORS[report.nodeid] = str(getattr(crash, "message", report.longrepr))[:400]


def pytest_sessionfinish(session: pytest.Session) -> None:
    with open(os.environ["TQ_SWAP_REPORT"], "w") as out:
        json.dump({"outcomes": _OUTCOMES, "errors": _ERRORS}, out, indent=1)
