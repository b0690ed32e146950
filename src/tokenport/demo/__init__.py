"""`tokenport demo` (``run``) and its embedded corpus, the Python standard library (``corpus``)."""

from .corpus import build_demo_corpus
from .run import run_demo

__all__ = ["build_demo_corpus", "run_demo"]
