"""`tokenport demo` (``run``) and its embedded corpus, the Python standard library (``corpus``)."""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .corpus import build_demo_corpus
    from .run import run_demo

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "build_demo_corpus": ".corpus",
    "run_demo": ".run",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
