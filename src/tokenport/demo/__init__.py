"""`tokenport demo` (``run``) and its embedded corpus, the Python standard library (``corpus``)."""

from .. import _lazy

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "build_demo_corpus": ".corpus",
    "run_demo": ".run",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
