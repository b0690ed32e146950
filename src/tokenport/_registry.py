"""One style for every extension point: a `Registry` of names to extensions (a class or a factory),
filled by ``register_*`` calls in tokenport and in plugins.

A plugin is a module named by an entry point of the group ``tokenport.plugins``; importing it
registers its extensions. A registry loads the plugins the first time a name is missing, so a
manifest, a receipt or a CLI flag can name an extension that lives outside tokenport.
"""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from .errors import ConfigError

T = TypeVar("T")

PLUGIN_GROUP = "tokenport.plugins"
_loaded: tuple[str, ...] | None = None  # the entry points imported, once the group has been read
_failures = ""  # why some could not be: said again at every later call, never forgotten
_lock = threading.RLock()


def load_plugins() -> tuple[str, ...]:
    """Import every module of the ``tokenport.plugins`` entry-point group, once per process; the
    names of the entry points loaded. Plugins that fail to import do not stop the others; they are
    a ConfigError naming each, raised now and at every later call."""
    global _loaded, _failures
    with _lock:
        if _loaded is None:
            names, failures = [], []
            for point in importlib.metadata.entry_points(group=PLUGIN_GROUP):
                try:
                    point.load()
                except Exception as exc:  # a plugin's own failure, reported with its name
                    failures.append(f"{point.name!r} ({point.value}) failed to load: {type(exc).__name__}: {exc}")
                else:
                    names.append(point.name)
            _loaded, _failures = tuple(names), "; ".join(failures)
        if _failures:
            raise ConfigError(
                f"tokenport plugin {_failures}; fix or uninstall the package that declares it in the "
                f"{PLUGIN_GROUP!r} entry points"
            )
        return _loaded


class Registry(Generic[T]):
    """Names -> extensions of one kind (`what`, e.g. "tokenizer backend"). `accepts` says whether an
    object may be registered; `expected` describes what it must be, for the error."""

    def __init__(self, what: str, accepts: Callable[[object], bool], expected: str) -> None:
        self.what = what
        self._accepts = accepts
        self._expected = expected
        self._items: dict[str, T] = {}
        self._built_in: frozenset[str] = frozenset()

    def register(self, name: str, item: T) -> None:
        """Add `item` under `name`. Registering the same object again is a no-op; a name taken by
        another object, a bad name or an object of the wrong kind is a ConfigError, and changes nothing."""
        if not isinstance(name, str) or not name or not name.replace("-", "_").replace(".", "_").isidentifier():
            raise ConfigError(f"register {self.what}: the name must be a non-empty identifier, got {name!r}")
        if not self._accepts(item):
            raise ConfigError(f"register {self.what} {name!r}: expected {self._expected}, got {item!r:.80}")
        with _lock:
            taken = self._items.get(name)
            if taken is not None and taken is not item:
                raise ConfigError(f"register {self.what} {name!r}: that name is taken by {_label(taken)}; pick another")
            self._items[name] = item

    def seal_built_ins(self) -> None:
        """Mark what is registered now as tokenport's own (`added()` leaves those out)."""
        self._built_in = frozenset(self._items)

    def find(self, name: str) -> T | None:
        """The extension called `name`, loading plugins first if it is missing; None if it is not there either."""
        if not isinstance(name, str):
            return None
        if name not in self._items:
            load_plugins()
        return self._items.get(name)

    def get(self, name: str, *, where: str = "") -> T:
        """The extension called `name` (see `find`); ConfigError naming the known names (and `where` the
        name came from) when it is not there."""
        item = self.find(name)
        if item is None:
            known = ", ".join(sorted(self._items)) or "none"
            place = f"{where}: " if where else ""
            raise ConfigError(
                f"{place}unknown {self.what} {name!r} (known: {known}); register it with tokenport's "
                f"register function for {self.what}s, or install the plugin that does"
            )
        return item

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._items))

    def items(self) -> tuple[tuple[str, T], ...]:
        return tuple(self._items.items())

    def added(self) -> tuple[tuple[str, T], ...]:
        """What was registered besides tokenport's own: for worker processes to register too."""
        return tuple((name, item) for name, item in self._items.items() if name not in self._built_in)


def _label(item: object) -> str:
    kind = item if isinstance(item, type) or callable(item) else type(item)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', repr(kind))}"
