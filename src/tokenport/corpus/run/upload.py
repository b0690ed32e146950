"""Publishing a prepared output to an object-store URL: the files uploaded and checked, then the
dataset manifest, so whoever finds ``URL/tokenport.json`` finds every store it names whole.

A run with an object-store output prepares into a local staging directory (see `staging_dir`),
then `upload_output`: a journal ``URL/.tokenport-upload.json`` naming every file with its size
and MD5 first, then each file (skipped when the object there already has that size and MD5: a
rerun finishes an interrupted upload), each checked after its PUT, then ``tokenport.json``, then
the journal goes. A journal left by a run with other settings is rolled back first (the files it
names are deleted); an output already finished with other settings, or a prefix holding other
objects, is refused before any work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from ...errors import ConfigError, StorageError
from ...storage import read_small
from .state import MANIFEST_NAME, WORK_DIR

logger = logging.getLogger(__name__)

JOURNAL_NAME = ".tokenport-upload.json"
_CHUNK = 8 << 20


def staging_dir(url: str) -> str:
    """The local directory a run with output `url` prepares into before uploading (kept between
    reruns, so an interrupted run resumes): $TOKENPORT_CACHE_DIR/prepare/..., else under ~/.cache/tokenport."""
    root = os.environ.get("TOKENPORT_CACHE_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "tokenport"
    return str(base / "prepare" / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24])


def remote_manifest(url: str) -> dict[str, Any] | None:
    """The dataset manifest at `url` (a finished upload), or None when there is none yet."""
    data = read_small(_join(url, MANIFEST_NAME))
    if data is None:
        return None
    try:
        manifest = json.loads(data)
    except ValueError as exc:
        raise StorageError(f"{_join(url, MANIFEST_NAME)}: not JSON ({exc}); delete it and run again") from None
    if not isinstance(manifest, dict):
        raise StorageError(f"{_join(url, MANIFEST_NAME)}: not a prepare manifest; delete it and run again")
    return manifest


def check_remote_output(url: str, fingerprint: str) -> dict[str, Any] | None:
    """The manifest at `url` if a run with this fingerprint finished it, None if unfinished; a
    ConfigError when a run with other settings did."""
    manifest = remote_manifest(url)
    if manifest is not None and manifest.get("fingerprint") != fingerprint:
        raise ConfigError(
            f"{url}: output exists (a finished prepare run with other settings); choose another URL or delete it"
        )
    if manifest is None and read_small(_join(url, JOURNAL_NAME)) is None:
        others = _objects(url)
        if others:
            raise ConfigError(
                f"{url}: holds objects ({', '.join(others[:3])}...) and no prepare run; choose a new or empty prefix"
            )
    return manifest


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


def upload_output(local: str, url: str, fingerprint: str) -> None:
    """Upload the finished output directory `local` to `url` as the module says: journal, files
    (each checked), manifest; finishing or rolling back an upload a killed run left."""
    from ...storage.remote import RemoteOptions, open_fs, with_retries

    fs, root = open_fs(url, {})
    options = RemoteOptions()

    def retried(what: str, target: str, fn: Any) -> Any:
        return with_retries(fn, url=_join(url, target), what=what, options=options)

    files = _listing(local)
    journal = {"fingerprint": fingerprint, "files": files}
    journal_path = _join(root, JOURNAL_NAME)
    earlier = read_small(_join(url, JOURNAL_NAME))
    if earlier is not None:
        left = json.loads(earlier)
        if left.get("fingerprint") != fingerprint:  # another run's half upload: roll it back
            logger.info("%s: removing the files of an interrupted upload with other settings", url)
            for name in left.get("files", {}):
                if name not in files:
                    retried("deleting", name, lambda name=name: fs.rm_file(_join(root, name)))
    retried("writing the upload journal", JOURNAL_NAME, lambda: fs.pipe_file(journal_path, _dumps(journal)))
    for name, (size, md5) in files.items():
        target = _join(root, name)
        if _matches(retried("reading object metadata", name, lambda target=target: _info(fs, target)), size, md5):
            continue  # uploaded whole by an interrupted run
        retried("uploading", name, lambda name=name, target=target: fs.put_file(os.path.join(local, name), target))
        if not _matches(retried("reading object metadata", name, lambda target=target: _info(fs, target)), size, md5):
            raise StorageError(
                f"{_join(url, name)}: the uploaded object does not have the size and MD5 of {local}/{name}; "
                "run again to upload it again"
            )
    with open(os.path.join(local, MANIFEST_NAME), "rb") as f:
        manifest = f.read()
    retried("writing the manifest", MANIFEST_NAME, lambda: fs.pipe_file(_join(root, MANIFEST_NAME), manifest))
    retried("deleting the upload journal", JOURNAL_NAME, lambda: fs.rm_file(journal_path))


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
