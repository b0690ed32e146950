"""A Hugging Face model name given as a tokenizer (``gpt2``, ``Qwen/Qwen2.5-0.5B``): tokenport downloads
nothing, so the name is found in the local HF hub cache (where ``from_pretrained`` left it), or refused
with the exact steps that put its tokenizer.json where tokenport reads it."""

from __future__ import annotations

import os
import re

from ..errors import TokenizerError

__all__ = ["hub_cache", "looks_like_hub_name", "resolve_hub_name"]

_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?\Z")


def looks_like_hub_name(text: str) -> bool:
    """Whether `text` reads as a hub model id (NAME or ORG/NAME), not as a file name."""
    return bool(_NAME.match(text)) and not text.endswith((".json", ".model", ".tiktoken"))


def hub_cache() -> str:
    """The HF hub cache directory, as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub, else
    XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return os.path.expanduser(os.environ[variable])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "hub")


def _cached_snapshot(name: str, cache: str) -> str | None:
    """The snapshot directory of model `name` in `cache` holding a tokenizer.json: the one refs/main names,
    else the most recently written one; None when there is none."""
    model = os.path.join(cache, "models--" + name.replace("/", "--"))
    snapshots = os.path.join(model, "snapshots")
    try:
        with open(os.path.join(model, "refs", "main"), encoding="utf-8") as f:
            main = f.read().strip()
    except OSError:
        main = ""
    try:
        found = [os.path.join(snapshots, d) for d in os.listdir(snapshots)]
    except OSError:
        return None
    found = [d for d in found if os.path.isfile(os.path.join(d, "tokenizer.json"))]
    found.sort(key=lambda d: (os.path.basename(d) == main, os.stat(d).st_mtime_ns, d))
    return found[-1] if found else None


def resolve_hub_name(name: str) -> str:
    """The local directory holding model `name`'s tokenizer.json (in the HF hub cache), or a TokenizerError
    saying that tokenport downloads nothing and how to save the tokenizer to a folder it reads."""
    cache = hub_cache()
    snapshot = _cached_snapshot(name, cache)
    if snapshot is not None:
        return snapshot
    folder = "tok/" + name.rsplit("/", 1)[-1]
    raise TokenizerError(
        f"tokenizer {name!r} is neither a file nor a folder here, and not in the Hugging Face cache ({cache}); "
        'tokenport downloads nothing. On a machine with network, save it to a folder: python -c "from '
        f"transformers import AutoTokenizer; AutoTokenizer.from_pretrained('{name}').save_pretrained('{folder}')\", "
        f"copy {folder} here, then pass --tokenizer {folder} (or --tokenizer hf:{folder}/tokenizer.json); "
        "or --tokenizer byte for the built-in byte-level tokenizer"
    )
