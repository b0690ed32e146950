"""prepare: raw corpora (jsonl, parquet, text; local or object storage) to token stores.

A pipeline of steps over `Document`s (read -> tokenize -> write), run in work units on local
worker processes, assembled into Megatron-compatible ``part-NNNNN.{bin,idx}`` stores with a
``tokenport.json`` dataset manifest. See `prepare` and `PrepareConfig`.
"""

import typing

from .. import _lazy

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .inputs.documents import Document, DocumentStep
    from .inputs.readers import read_slice
    from .run.config import PrepareConfig, register_prepare_option
    from .run.options import PrepareOption
    from .run.pipeline import PrepareResult, prepare
    from .run.stats import SKIP_KINDS
    from .run.tokenize import TokenBatch, Tokenize, split_text
    from .run.why import WhyReport, why
    from .steps.base import Step
    from .steps.pii import PII_KINDS, PIIScrubber
    from .steps.registry import register_step
    from .steps.runwide import RunWideStep

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "Document": ".inputs.documents",
    "DocumentStep": ".inputs.documents",
    "PII_KINDS": ".steps.pii",
    "PIIScrubber": ".steps.pii",
    "PrepareConfig": ".run.config",
    "PrepareOption": ".run.options",
    "PrepareResult": ".run.pipeline",
    "RunWideStep": ".steps.runwide",
    "SKIP_KINDS": ".run.stats",
    "Step": ".steps.base",
    "TokenBatch": ".run.tokenize",
    "Tokenize": ".run.tokenize",
    "prepare": ".run.pipeline",
    "read_slice": ".inputs.readers",
    "register_prepare_option": ".run.config",
    "register_step": ".steps.registry",
    "split_text": ".run.tokenize",
    "WhyReport": ".run.why",
    "why": ".run.why",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
