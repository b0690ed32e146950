"""Publishing a prepared output to an object-store URL: the files uploaded and checked, then the
dataset manifest, so whoever finds ``URL/tokenport.json`` finds every store it names whole.

A run with an object-store output prepares into a local staging directory (see `staging_dir`),
then `upload_output`: a journal ``URL/.tokenport-upload.json`` naming every file with its size
and MD5 first, then each file (skipped when the object there already has that size and MD5: a
rerun finishes an interrupted upload), each checked after its PUT, then ``tokenport.json``, then
the journal goes, then the staging directory. A journal left by a run with other settings is rolled
back first (the files it names are deleted); an output already finished with other settings, a
prefix holding other objects, or a journal that is not one (`UploadJournal`) is refused before any
work. Whoever touches a finished prefix next finishes a killed run's clean-up: the journal of the
finished run and the staging directory go. With overwrite, a finished output stays published while
the new run prepares; its upload first withdraws it (`_withdraw`): a journal naming its objects, the
manifest, the objects, the journal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Annotated, Any

import msgspec

from ..._files import KillPoints
from ..._schema import Count, Document, Int64, Text, decode
from ...errors import ConfigError, StorageError
from ...storage import read_small
from .state import MANIFEST_NAME, WORK_DIR, kill_point

logger = logging.getLogger(__name__)

JOURNAL_NAME = ".tokenport-upload.json"
KILL_AT = "TOKENPORT_UPLOAD_KILL_AT"
"""Directed-kill tests set this to N: the process ends after the N-th publication step of an upload
(each step is also one of prepare's kill points, `state.KILL_AT`, after the staging directory's renames)."""
_CHUNK = 8 << 20
_upload_kill_point = KillPoints(KILL_AT)

MD5 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
"""An MD5 digest in lowercase hex, as the journal's writer records it."""
Name = Annotated[str, msgspec.Meta(pattern=r"^(?!/)(?!.*//)(?!(.*/)?\.\.?(/|$))[^\x00]+(?<!/)$")]
"""A relative object name under the prefix: no leading or trailing slash, no empty, "." or ".." segment."""


class UploadJournal(Document, frozen=True):
    """``URL/.tokenport-upload.json``: the run that is uploading (its settings' fingerprint) and the
    files it uploads, each as [size, MD5]."""

    fingerprint: Text
    files: dict[Name, tuple[Count, MD5]]

    def __post_init__(self) -> None:
        for name in (MANIFEST_NAME, JOURNAL_NAME):
            if name in self.files:
                raise ValueError(f"{name} is never one of the files a journal names - at `$.files`")


def staging_dir(url: str) -> str:
    """The local directory a run with output `url` prepares into before uploading (kept between
    reruns, so an interrupted run resumes): $TOKENPORT_CACHE_DIR/prepare/..., else under ~/.cache/tokenport."""
    root = os.environ.get("TOKENPORT_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "tokenport"
    return str(base / "prepare" / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24])


def read_journal(url: str) -> UploadJournal | None:
    """The upload journal at `url` (an unfinished or uncleaned upload), or None; a StorageError naming
    it and its field when it is not one."""
    data = read_small(_join(url, JOURNAL_NAME))
    if data is None:
        return None
    return decode(
        data,
        UploadJournal,
        where=_join(url, JOURNAL_NAME),
        remedy="it is not an upload journal tokenport wrote; delete the prefix's objects and run again, "
        "or choose another URL",
        error=StorageError,
    )


class _Part(msgspec.Struct, frozen=True):
    name: Name
    documents: Count
    tokens: Count


class _Totals(msgspec.Struct, frozen=True):
    documents: Count
    tokens: Count
    bytes_in: Count
    units: Count


class _Finished(msgspec.Struct, frozen=True):
    """What a rerun reads of a finished upload's dataset manifest (the fields its result is made of);
    the rest of the manifest is the dataset's own and passes through."""

    fingerprint: Text
    parts: list[_Part]
    totals: _Totals
    skipped: dict[str, Count]
    steps: dict[str, dict[str, Int64]] = {}


def remote_manifest(url: str) -> dict[str, Any] | None:
    """The dataset manifest at `url` (a finished upload), or None when there is none yet; a
    StorageError naming it and its field when it is not one."""
    where = _join(url, MANIFEST_NAME)
    data = read_small(where)
    if data is None:
        return None
    remedy = "it is not a prepare manifest tokenport wrote; delete it and run again"
    decode(data, _Finished, where=where, remedy=remedy, error=StorageError)
    manifest: dict[str, Any] = decode(data, dict[str, Any], where=where, remedy=remedy, error=StorageError)
    return manifest


def check_remote_output(url: str, fingerprint: str, *, overwrite: bool = False) -> dict[str, Any] | None:
    """The manifest at `url` if a run with this fingerprint finished it, None if unfinished (or, with
    `overwrite`, finished but to be replaced at upload: `upload_output(replace=True)`); a ConfigError
    when a run with other settings did. Read first, before any work: the journal is checked
    (`read_journal`), and a finished upload's leftovers (its journal, the staging directory) are removed."""
    journal = read_journal(url)
    manifest = remote_manifest(url)
    if manifest is not None:
        finish_cleanup(url, manifest, journal)
        if overwrite:
            return None  # the finished run stays published until the new one is ready to upload
        if manifest.get("fingerprint") != fingerprint:
            raise ConfigError(
                f"{url}: output exists (a finished prepare run with other settings); choose another URL, or pass "
                "overwrite=True (--force) to replace it"
            )
    if manifest is None and journal is None:
        others = _objects(url)
        if others:
            raise ConfigError(
                f"{url}: holds objects ({', '.join(others[:3])}...) and no prepare run; choose a new or empty prefix"
            )
    return manifest


def finish_cleanup(url: str, manifest: dict[str, Any], journal: UploadJournal | None) -> None:
    """Finish what a run killed after publishing `url`'s manifest left: its journal, then the staging directory."""
    if journal is not None and journal.fingerprint == manifest.get("fingerprint"):
        logger.info("%s: removing the journal of a finished upload", url)
        from ...storage.remote import RemoteOptions, open_fs, with_retries

        fs, root = open_fs(url, {})
        with_retries(
            lambda: fs.rm_file(_join(root, JOURNAL_NAME)),
            url=_join(url, JOURNAL_NAME),
            what="deleting the upload journal",
            options=RemoteOptions(),
        )
        _kill_point()
    staging = staging_dir(url)
    if os.path.exists(staging):
        logger.info("%s: removing the staging directory %s of a finished upload", url, staging)
        try:
            shutil.rmtree(staging)
        except FileNotFoundError:
            pass  # the finishing run removed it meanwhile
        except OSError as exc:
            raise StorageError(
                f"{staging}: cannot remove this staging directory of the finished upload to {url} "
                f"({exc.strerror}); remove it yourself"
            ) from None


def _objects(url: str) -> list[str]:
    """Names of the objects under the prefix `url` (none if it does not exist)."""
    from ...storage.remote import RemoteOptions, open_fs, with_retries

    fs, root = open_fs(url, {})

    def listing() -> list[str]:
        fs.invalidate_cache(root)
        try:
            return sorted(path[len(root) :].lstrip("/") for path in fs.find(root))
        except FileNotFoundError:
            return []

    return with_retries(listing, url=url, what="listing the output prefix", options=RemoteOptions())


def upload_output(local: str, url: str, fingerprint: str, *, replace: bool = False) -> None:
    """Upload the finished output directory `local` to `url` as the module says: journal, files
    (each checked), manifest, journal removed; finishing or rolling back an upload a killed run left.
    With `replace` (prepare's overwrite), a finished run there is withdrawn first (`_withdraw`).
    The caller removes `local` afterwards."""
    from ...storage.remote import RemoteOptions, open_fs, with_retries

    fs, root = open_fs(url, {})
    options = RemoteOptions()

    def retried(what: str, target: str, fn: Any) -> Any:
        return with_retries(fn, url=_join(url, target), what=what, options=options)

    finished = remote_manifest(url) if replace else None
    if finished is not None:
        _withdraw(fs, root, url, retried, finished)
    files = _listing(local)
    journal = {"fingerprint": fingerprint, "files": files}
    journal_path = _join(root, JOURNAL_NAME)
    earlier = read_journal(url)
    if earlier is not None and earlier.fingerprint != fingerprint:  # another run's half upload: roll it back
        logger.info("%s: removing the files of an interrupted upload with other settings", url)
        for name in earlier.files:
            if name not in files:
                retried("deleting", name, lambda name=name: fs.rm_file(_join(root, name)))
                _kill_point()
    retried("writing the upload journal", JOURNAL_NAME, lambda: fs.pipe_file(journal_path, _dumps(journal)))
    _kill_point()
    for name, (size, md5) in files.items():
        target = _join(root, name)
        if _matches(retried("reading object metadata", name, lambda target=target: _info(fs, target)), size, md5):
            continue  # uploaded whole by an interrupted run
        retried("uploading", name, lambda name=name, target=target: fs.put_file(os.path.join(local, name), target))
        _kill_point()
        if not _matches(retried("reading object metadata", name, lambda target=target: _info(fs, target)), size, md5):
            raise StorageError(
                f"{_join(url, name)}: the uploaded object does not have the size and MD5 of {local}/{name}; "
                "run again to upload it again"
            )
    with open(os.path.join(local, MANIFEST_NAME), "rb") as f:
        manifest = f.read()
    retried("writing the manifest", MANIFEST_NAME, lambda: fs.pipe_file(_join(root, MANIFEST_NAME), manifest))
    _kill_point()
    retried("deleting the upload journal", JOURNAL_NAME, lambda: fs.rm_file(journal_path))
    _kill_point()


def _withdraw(fs: Any, root: str, url: str, retried: Any, finished: dict[str, Any]) -> None:
    """Delete the finished run at `url`, in an order a kill cannot turn into a mix presented as finished:
    a journal naming its objects (as a run of other settings: the next upload rolls back what is left),
    the manifest (from here nothing names a store), each object, the journal; a publication step each."""
    old = [name for name in _objects(url) if name not in (MANIFEST_NAME, JOURNAL_NAME)]

    def size(name: str) -> int:
        info = retried("reading object metadata", name, lambda: _info(fs, _join(root, name)))
        return int((info or {}).get("size", 0))

    files = {name: [size(name), "0" * 32] for name in old}  # an MD5 no upload matches: each is uploaded again
    journal = {"fingerprint": f"replaced:{finished.get('fingerprint')}", "files": files}
    logger.info("%s: replacing the finished prepare run there (overwrite)", url)
    journal_path = _join(root, JOURNAL_NAME)
    retried("writing the upload journal", JOURNAL_NAME, lambda: fs.pipe_file(journal_path, _dumps(journal)))
    _kill_point()
    retried("deleting the manifest", MANIFEST_NAME, lambda: fs.rm_file(_join(root, MANIFEST_NAME)))
    _kill_point()
    for name in old:
        retried("deleting", name, lambda name=name: fs.rm_file(_join(root, name)))
        _kill_point()
    retried("deleting the upload journal", JOURNAL_NAME, lambda: fs.rm_file(journal_path))
    _kill_point()


def _kill_point() -> None:
    """End the process here if this is the publication step `KILL_AT` (or prepare's `state.KILL_AT`) names."""
    kill_point()
    _upload_kill_point()


def _listing(local: str) -> dict[str, tuple[int, str]]:
    """Every file of the finished output but its manifest: relative name -> (size, MD5 hex)."""
    files = {}
    for directory, subdirs, names in os.walk(local):
        subdirs[:] = sorted(d for d in subdirs if d != WORK_DIR)
        for name in sorted(names):
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, local).replace(os.sep, "/")
            if relative != MANIFEST_NAME:
                files[relative] = (os.path.getsize(path), _md5(path))
    return files


def _md5(path: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _info(fs: Any, path: str) -> dict[str, Any] | None:
    fs.invalidate_cache(path)
    try:
        return fs.info(path)
    except FileNotFoundError:
        return None


def _matches(info: dict[str, Any] | None, size: int, md5: str) -> bool:
    """Whether an object's metadata shows these bytes: its size, and its ETag when that is the
    content's MD5 (a single-part upload; a multipart ETag is checked by size alone)."""
    if info is None or int(info.get("size", -1)) != size:
        return False
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    return "-" in etag or not etag or etag == md5


def _join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def _dumps(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
