"""prepare: raw corpora (jsonl, parquet, text; local or object storage) to token stores.

A pipeline of steps over `Document`s (read -> tokenize -> write), run in work units on local
worker processes, assembled into Megatron-compatible ``part-NNNNN.{bin,idx}`` stores with a
``tokenport.json`` dataset manifest. See `prepare` and `PrepareConfig`.
"""

from .inputs.documents import Document, DocumentStep
from .inputs.readers import read_slice
from .run.config import PrepareConfig
from .run.pipeline import PrepareResult, prepare
from .run.stats import SKIP_KINDS
from .run.tokenize import TokenBatch, Tokenize, split_text
from .steps.base import Step
from .steps.pii import PII_KINDS, PIIScrubber
from .steps.registry import register_step

__all__ = [
    "Document",
    "DocumentStep",
    "PII_KINDS",
    "PIIScrubber",
    "PrepareConfig",
    "PrepareResult",
    "SKIP_KINDS",
    "Step",
    "TokenBatch",
    "Tokenize",
    "prepare",
    "read_slice",
    "register_step",
    "split_text",
]
