"""Local paths that are not a store prefix: prepare output directories and raw corpus files.

A prepare output directory (``tokenport.json`` beside ``part-00000.bin/.idx``...) stands for its
parts, in the order its manifest lists them. A path that exists but holds no store (a .jsonl, a
directory of raw files, an HF ``save_to_disk`` folder, an unfinished prepare run) is refused with
what it is and the command that makes a store of it, never as "PATH.idx: file not found".
"""

from __future__ import annotations

import json
import os
import shlex
import stat

import msgspec

from .._schema import Text, decode
from ..errors import ConfigError, CorruptStoreError
from ..storage import is_remote, local_path, read_small

RUN_MANIFEST = "tokenport.json"  # a prepare output directory's listing of its parts

_STORE_SUFFIXES = (".bin", ".idx", ".json")
# what prepare reads (corpus/inputs), and other text formats people keep corpora in
RAW_SUFFIXES = (".jsonl", ".json", ".ndjson", ".parquet", ".arrow", ".txt", ".text", ".csv", ".tsv", ".md")
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".xz")


class _Part(msgspec.Struct, frozen=True):
    """One part a run manifest lists: only its name is read here (prepare's own reader reads the rest)."""

    name: Text

    def __post_init__(self) -> None:
        if self.name in (".", "..") or "/" in self.name or os.sep in self.name or "\0" in self.name:
            raise ValueError(f"{self.name!r} is not a part's file name - at `name`")


class _RunParts(msgspec.Struct, frozen=True):
    """The listing of a run manifest (``tokenport.json``): other keys are prepare's, and read by it."""

    parts: list[_Part]


def run_parts(directory: str) -> list[str]:
    """The part prefixes of the prepare output ``directory``, in the order its manifest lists them;
    ConfigError saying what the directory holds when it is not a finished prepare output."""
    path = os.path.join(directory, RUN_MANIFEST)
    remedy = "rerun prepare to rebuild it"
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())  # Python's json: prepare's other keys may hold what it writes (NaN)
    except FileNotFoundError:
        raise not_a_prepare_output(directory) from None
    except OSError as exc:
        raise CorruptStoreError(f"{path}: cannot read it ({exc.strerror}); {remedy}") from None
    except ValueError as exc:  # not UTF-8, not JSON
        raise CorruptStoreError(f"{path}: not valid JSON ({exc}); {remedy}") from None
    listing = {"parts": data.get("parts")} if isinstance(data, dict) and "parts" in data else data
    manifest = decode(listing, _RunParts, where=path, remedy=remedy, error=CorruptStoreError)
    if not manifest.parts:
        raise ConfigError(f"{directory}: the prepare run wrote no parts (no documents kept)")
    return [os.path.join(directory, part.name) for part in manifest.parts]


def directory_parts(text: str) -> list[str] | None:
    """The parts the local prepare output directory ``text`` stands for; None when ``text`` is no local
    directory, or when a store ``text`` (``text.idx``) sits beside it (then ``text`` names that store)."""
    if is_remote(text):
        return None
    path = local_path(text)
    if not os.path.isdir(path) or os.path.exists(path + ".idx"):
        return None
    return run_parts(path)


def check_not_raw(text: str) -> None:
    """ConfigError when the local path ``text`` is an existing file that is no store's file (a raw corpus:
    prepare it first); nothing for a prefix, a store's own file, or a path that does not exist."""
    if is_remote(text):
        return
    path = local_path(text)
    try:
        if not os.path.isfile(path):
            return
    except (OSError, ValueError):
        return
    if path.endswith(_STORE_SUFFIXES):
        prefix = path[: path.rfind(".")]
        if path.endswith((".bin", ".idx")) or os.path.exists(prefix + ".idx") or os.path.exists(prefix + ".bin"):
            return  # a store's file (a .json beside its .bin/.idx is its manifest)
    elif os.path.exists(path + ".idx"):
        return  # a prefix that is also a file's name: the store beside it is meant
    raise raw_file_error(text)


def raw_file_error(text: str) -> ConfigError:
    """The error for a raw corpus file given where a token store is read."""
    kind = "a raw corpus file" if _is_raw_name(text) else "a file but not a token store (no .bin/.idx of that name)"
    return ConfigError(f"{text} is {kind}, not a token store: prepare it first: {_prepare_command(text)}")


def not_a_prepare_output(directory: str) -> ConfigError:
    """The error for a directory given as a store that is not a finished prepare output: what it holds, what to do."""
    try:
        names = sorted(name for name in os.listdir(directory) if not name.startswith("."))
        unfinished = os.path.isdir(os.path.join(directory, ".work"))
    except OSError as exc:
        return ConfigError(f"{directory}: cannot list the directory ({exc.strerror}); check the path")
    stores = [name[:-4] for name in names if name.endswith(".idx") and not name.endswith(".mask.idx")]
    outputs = [name for name in names if os.path.isfile(os.path.join(directory, name, RUN_MANIFEST))]
    raw = [name for name in names if _is_raw_name(name) and os.path.isfile(os.path.join(directory, name))]
    head = f"{directory} is a directory without {RUN_MANIFEST}, so not a prepare output"
    if unfinished:
        return ConfigError(
            f"{head}: it holds an unfinished prepare run (.work/); rerun the same tokenport prepare command "
            "to finish it, then pass the directory"
        )
    for found, what in ((stores, "token store(s); pass them by prefix"), (outputs, "prepare output(s); pass them")):
        if found:
            shown = " ".join(shlex.quote(os.path.join(directory, name)) for name in found[:3])
            more = f" ... ({len(found)} in all)" if len(found) > 3 else ""
            return ConfigError(f"{head}: it holds {len(found)} {what}: {shown}{more}")
    if "state.json" in names and "dataset_info.json" in names:
        return ConfigError(
            f"{directory} is an HF dataset saved to disk (a raw corpus), not a token store: prepare it first: "
            f"{_prepare_command(directory)}"
        )
    if raw:
        shown = ", ".join(raw[:3]) + (f", ... ({len(raw)} in all)" if len(raw) > 3 else "")
        return ConfigError(
            f"{head}: it holds raw corpus files ({shown}), not token stores: prepare it first: "
            f"{_prepare_command(directory)}"
        )
    held = f"holds {len(names)} file(s) ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}), none a token store"
    return ConfigError(
        f"{head}: it {held if names else 'is empty'}; pass store prefixes (data/wiki for data/wiki.bin and "
        "data/wiki.idx) or the output directory of a finished tokenport prepare run"
    )


def _is_raw_name(name: str) -> bool:
    """Whether a file name ends like a raw corpus file (a compression suffix aside)."""
    lower = name.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if lower.endswith(suffix):
            lower = lower[: -len(suffix)]
            break
    return lower.endswith(RAW_SUFFIXES)


def _prepare_command(text: str) -> str:
    """The prepare command that makes a store of the raw corpus at ``text``, its output named after it."""
    name = os.path.basename(os.path.normpath(local_path(text))) or "corpus"
    while True:
        stem, suffix = os.path.splitext(name)
        if not suffix or not stem:
            break
        name = stem
    return f"tokenport prepare {shlex.quote(text)} -o {shlex.quote('stores/' + name)}"


def single_store(text: str) -> str:
    """What ``IndexedDataset(text)`` opens: ``text`` itself, or the one part of a prepare output directory;
    ConfigError for a directory of several parts (naming the call that reads them all) or a raw file."""
    if is_remote(text):
        return text
    try:
        mode = os.stat(local_path(text)).st_mode
    except (OSError, ValueError):
        return text  # a prefix (its .bin/.idx are the files), or nothing: opening says which
    if stat.S_ISDIR(mode):
        parts = directory_parts(text)
        if parts is None or len(parts) == 1:
            return text if parts is None else parts[0]
        raise ConfigError(
            f"{text} is a prepare output of {len(parts)} parts; IndexedDataset opens one store: open each "
            f"with [IndexedDataset(p) for p in tokenport.indexed.resolve_stores([{text!r}])], build samples "
            f"over all of them with tokenport.build_datasets([{text!r}], ...), or merge them into one store: "
            f"tokenport merge -o {shlex.quote(text.rstrip('/') + '-merged')} {shlex.quote(text)}"
        )
    check_not_raw(text)
    return text


def remote_output_error(url: str, remote_options: object = None) -> ConfigError | None:
    """For a remote prefix whose ``.idx`` is missing: the error naming its parts when ``url`` is a prepare
    output on object storage (``URL/tokenport.json``), which store lists do not expand; else None."""
    listing_url = url.rstrip("/") + "/" + RUN_MANIFEST
    try:
        data = read_small(listing_url, **({} if remote_options is None else {"options": remote_options}))
    except Exception:  # the probe is a courtesy: whatever fails, the caller's own error stands
        return None
    if data is None:
        return None
    try:
        listing = json.loads(data)
        parts = decode({"parts": listing.get("parts")}, _RunParts, where=listing_url, remedy="", error=ConfigError)
    except (ValueError, AttributeError, ConfigError):
        return None
    names = [f"{url.rstrip('/')}/{part.name}" for part in parts.parts]
    shown = " ".join(names[:3]) + (f" ... ({len(names)} in all)" if len(names) > 3 else "")
    return ConfigError(
        f"{url} is a prepare output on object storage: a remote directory is not expanded to its parts "
        f"(only a local one is); name the parts its {RUN_MANIFEST} lists: {shown}"
    )
