"""The `tokenport` command: one thin function per verb (``verbs``), its parser (``parser``), and a
Markdown reference of every verb and flag generated from that parser (``reference``)."""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Sequence

from ..errors import TokenportError
from .parser import _parser as _parser  # tests build the parser from here
from .parser import parse
from .reference import reference_markdown

__all__ = ["main", "reference_markdown"]


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # the disk (or a quota, or a file-size limit) is full


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: this process's arguments); the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _run(argv)
    except BrokenPipeError:  # `tokenport ... | head`: the reader has all it wanted
        return _reader_gone()


def _run(argv: Sequence[str]) -> int:
    """Parse, then run the verb; a TokenportError or OSError becomes one line on stderr."""
    try:
        parser, args = parse(argv)  # building prepare's flags loads plugins, which may fail
    except BrokenPipeError:
        raise
    except (TokenportError, OSError) as exc:
        return _failed(exc)
    if args.verbose and args.quiet:  # one before the verb, the other after it
        parser.error("-v/--verbose and -q/--quiet contradict each other: give one")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        status: int = args.run(args)
        sys.stdout.flush()  # a reader gone shows here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        raise
    except (TokenportError, OSError) as exc:
        return _failed(exc, getattr(args, "output", None))
    except ModuleNotFoundError as exc:  # an optional import deep in a verb, not guarded by require()
        return _missing(exc)
    except KeyboardInterrupt:
        print("tokenport: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


def _reader_gone() -> int:
    """Exit quietly as a shell tool does when stdout's reader closed (128 + SIGPIPE): stdout is
    pointed at the null device so the interpreter's last flush does not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout with no descriptor (captured): nothing left to flush
        pass
    return 141


# the pip extra of each optional package a verb may import (pyproject.toml's optional-dependencies)
_EXTRAS = {
    "torch": "torch",
    "matplotlib": "plot",
    "yaml": "yaml",
    "ray": "ray",
    "prometheus_client": "metrics",
    "jinja2": "chat",
    "tokenizers": "hf",
    "tiktoken": "tiktoken",
    "sentencepiece": "sentencepiece",
    "pyarrow": "parquet",
    "pycld2": "lang",
    "s3fs": "s3",
    "fsspec": "s3",
    "gigatoken": "gigatoken",
    "grain": "grain",
    "zstandard": "fast",
}


def _missing(exc: ModuleNotFoundError) -> int:
    """Exit status 2 with one line naming the package missing and the pip command installing it."""
    top = (exc.name or "").split(".")[0]
    if top.startswith("tokenport") or not top:  # our own module missing: a broken install, not an extra
        raise exc
    fix = f"pip install 'tokenport[{_EXTRAS[top]}]'" if top in _EXTRAS else f"pip install {top}"
    print(f"tokenport: error: this needs the {top!r} package, which is not installed: {fix}", file=sys.stderr)
    return 2


def _failed(exc: TokenportError | OSError, output: str | None = None) -> int:
    """Exit status 2 with one line, no traceback: a TokenportError's message, or the path an OSError names
    (a full disk that names no file: the verb's `output`)."""
    if isinstance(exc, OSError) and exc.filename is None and output is not None and exc.errno in _FULL:
        print(
            f"tokenport: error: {output}: cannot write: {exc.strerror or exc}; free space on the disk holding it, "
            "or pass another -o/--output, then run the same command again",
            file=sys.stderr,
        )
    elif isinstance(exc, TokenportError) or exc.filename is None:
        print(f"tokenport: error: {exc if isinstance(exc, TokenportError) else exc.strerror or exc}", file=sys.stderr)
    else:  # a path that cannot be read or written
        target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
        print(
            f"tokenport: error: {exc.filename}{target}: {exc.strerror or exc}; check the path and its permissions",
            file=sys.stderr,
        )
    return 2
