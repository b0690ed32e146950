"""The TransferQueue adapter on Ray: one dock per named controller, joined by every process.

TransferQueue's ``tq.init()`` starts a controller actor named ``TransferQueueController`` in the
Ray namespace ``transfer_queue``; any later ``tq.init()`` on the cluster (a Ray worker, another
driver) finds it with ``ray.get_actor`` and talks to it. The adapter does the same: when Ray is
running and ``init`` gets no dock, the first process starts a controller actor of that name holding
the adapter (its bookkeeping: indexes, fields, keys, tags, consumption) over a ``RayDock``, and
every process's client forwards its calls to it, so all of them share one dock's data.

Data goes to the controller with each call (the bookkeeping and the dock must change together), and
from there into the ``RayDock``'s object store. The process that started the controller owns it:
its ``close()`` kills the controller (and the dock with it); a joined process's ``close()`` only
forgets its client (TransferQueue kills the controller from any process).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from .._optional import require

try:
    import ray
except ImportError as missing:  # name the extra; an import that fails for another reason stays as it is
    require(missing.name or "ray", extra="ray", feature="tokenport.dock.transferqueue_ray")
    raise
from ..errors import ConfigError
from .ray import _get

__all__ = ["NAME", "NAMESPACE", "RemoteClient", "TransferQueueController", "end", "join"]

NAME = "TransferQueueController"  # TransferQueue's controller actor name and namespace
NAMESPACE = "transfer_queue"
_THREADS = 64  # concurrent calls the controller serves (a waiting fetch holds one)

# the client methods a remote client forwards (the adapter's TransferQueueClient API)
_METHODS = frozenset(
    {
        "put", "get_meta", "get_data", "clear_partition", "clear_samples", "set_custom_meta",
        "get_partition_list", "get_consumption_status", "check_consumption_status",
        "get_production_status", "check_production_status", "reset_consumption", "kv_retrieve_meta",
        "kv_list",
    }
)  # fmt: skip


class TransferQueueController:
    """The actor holding the adapter's client over a ``RayDock``: ``start()`` makes it (in this actor's
    process), ``client()`` returns it, ``functions`` are the adapter's kv functions run here whole."""

    def __init__(self, start: Callable[[], None], client: Callable[[], Any], functions: dict[str, Callable]) -> None:
        start()
        self.client = client
        self.functions = functions

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``client.method(*args, **kwargs)`` on the controller's client."""
        if method not in _METHODS:
            raise ValueError(f"{method!r} is not a TransferQueue client call")  # a bug of RemoteClient
        return getattr(self.client(), method)(*args, **kwargs)

    def run(self, function: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The adapter's module function ``function(*args, **kwargs)`` here, over the controller's client."""
        return self.functions[function](*args, **kwargs)

    def config(self) -> Any:
        """The adapter's settings (a ``TransferQueueConfig``)."""
        return self.client().config

    def dock(self) -> Any:
        """The ``RayDock`` the adapter runs over (a handle any process can use)."""
        return self.client().dock

    # TransferQueueController's own names for what its users (tests' cleanups) call
    def list_partitions(self) -> list[str]:
        """The partitions, in creation order (TransferQueueController.list_partitions)."""
        return self.call("get_partition_list", (), {})

    def clear_partition(self, partition_id: str) -> None:
        """Forget a partition (TransferQueueController.clear_partition)."""
        self.call("clear_partition", (partition_id,), {})


def join(start: Callable[[], None], client: Callable[[], Any], functions: dict[str, Callable]) -> RemoteClient:
    """A client of the named controller, started here (see ``TransferQueueController``) unless one runs
    already (then its settings hold, as TransferQueue ignores a later ``conf``); ``owner`` says
    whether this call started it."""
    try:
        return RemoteClient(_ours(ray.get_actor(NAME, namespace=NAMESPACE)), owner=False)
    except ValueError:
        pass
    actor_class = ray.remote(TransferQueueController).options(
        name=NAME, namespace=NAMESPACE, num_cpus=0, max_concurrency=_THREADS
    )
    try:
        actor = actor_class.remote(start, client, functions)
    except ValueError:  # another process started it since the lookup: join that one
        return RemoteClient(_ours(ray.get_actor(NAME, namespace=NAMESPACE)), owner=False)
    joined = RemoteClient(actor, owner=True)
    joined.config  # noqa: B018  (waits until the controller is up)
    return joined


def _ours(actor: Any) -> Any:
    """``actor``, checked to be the adapter's controller (not the real transferqueue package's)."""
    if not hasattr(actor, "run"):
        raise ConfigError(
            f"the Ray actor {NAME!r} in namespace {NAMESPACE!r} is the transferqueue package's own controller, "
            "not tokenport's: close it (transfer_queue.close()) before init, or pass init(dock=...)"
        )
    return actor


def end(client: RemoteClient) -> None:
    """Kill the controller ``client`` started, and wait until its name is free for the next ``init``."""
    ray.kill(client.actor)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get_actor(NAME, namespace=NAMESPACE)
        except ValueError:
            return
        time.sleep(0.05)


class RemoteClient:
    """TransferQueue's client calls forwarded to the named controller (``TransferQueueClient``'s API)."""

    remote = True

    def __init__(self, actor: Any, owner: bool) -> None:
        self.actor = actor
        self.owner = owner

    @property
    def config(self) -> Any:
        """The controller's adapter settings."""
        return _get(self.actor.config.remote())

    @property
    def dock(self) -> Any:
        """The ``RayDock`` behind the controller."""
        return _get(self.actor.dock.remote())

    def run(self, function: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The adapter's module function ``function`` run by the controller."""
        return _get(self.actor.run.remote(function, args, kwargs))

    def close(self) -> None:
        """Nothing to release here (``transferqueue.close`` ends the controller where it was started)."""

    def __getattr__(self, name: str) -> Any:
        method = name.removeprefix("async_")
        if method not in _METHODS:
            raise AttributeError(f"TransferQueueClient has no attribute {name!r}")

        def forwarded(*args: Any, **kwargs: Any) -> Any:
            return _get(self.actor.call.remote(method, args, kwargs))

        if method == name:
            return forwarded

        async def twin(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(forwarded, *args, **kwargs)

        return twin
