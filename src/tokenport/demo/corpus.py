"""The embedded default corpus: the Python standard library's own source and docstrings.

Every machine that runs Python has it, so the demo and the tests use real text without any
download: a code dataset (one document per module) and a prose dataset (one per docstring). Each record
has an ``id`` (prepare's default identifier field): the module's dotted name for code ("json.decoder"),
the module and qualified name for a docstring ("json.dumps", "json.decoder.JSONDecoder.decode"; a module's
own docstring is its module's name), so ``tokenport why --id`` and ``where --id`` name one.
"""

from __future__ import annotations

import ast
import gzip
import inspect
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass

_SKIPPED_DIRECTORIES = {"site-packages", "dist-packages", "test", "tests", "__pycache__", "idle_test"}
_MIN_DOCSTRING_CHARS = 40


def stdlib_sources(limit: int | None = None) -> list[str]:
    """Paths of the standard library's .py files (tests and third-party packages excluded), sorted."""
    root = sysconfig.get_paths()["stdlib"]
    found: list[str] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d not in _SKIPPED_DIRECTORIES)
        found.extend(os.path.join(directory, name) for name in sorted(files) if name.endswith(".py"))
    found.sort()
    return found[:limit] if limit is not None else found


def read_source(path: str) -> str | None:
    """A source file's text, or None when it is not valid UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None


def docstrings(source: str) -> Iterator[str]:
    """The module, class and function docstrings of a source text, cleaned of indentation."""
    for _, text in named_docstrings(source):
        yield text


def named_docstrings(source: str) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of the module ("" for its own), class and function docstrings of a
    source text, in ``docstrings``' order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    names: dict[ast.AST, str] = {tree: ""}
    for node in ast.walk(tree):  # breadth first: a parent is named before its children
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names[child] = f"{names[node]}.{child.name}".lstrip(".")
            else:
                names[child] = names[node]
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text and len(text) >= _MIN_DOCSTRING_CHARS:
                yield names[node], inspect.cleandoc(text)


def module_name(path: str, root: str) -> str:
    """The dotted module name of a stdlib source file ("json/__init__.py" -> "json")."""
    return os.path.splitext(os.path.relpath(path, root))[0].replace(os.sep, ".").removesuffix(".__init__")


@dataclass(frozen=True)
class DemoCorpus:
    """Where the two demo datasets were written and how big they are."""

    code_path: str
    prose_path: str
    code_documents: int
    prose_documents: int
    code_bytes: int
    prose_bytes: int


def build_demo_corpus(directory: str, limit: int | None = None) -> DemoCorpus:
    """Write code.jsonl.gz (one module per line) and prose.jsonl (one docstring per line)."""
    os.makedirs(directory, exist_ok=True)
    code_path = os.path.join(directory, "code.jsonl.gz")
    prose_path = os.path.join(directory, "prose.jsonl")
    root = sysconfig.get_paths()["stdlib"]
    code_docs = prose_docs = code_bytes = prose_bytes = 0
    with (
        gzip.open(code_path + ".tmp", "wt", encoding="utf-8", compresslevel=5) as code,
        open(prose_path + ".tmp", "w", encoding="utf-8") as prose,
    ):
        for path in stdlib_sources(limit):
            source = read_source(path)
            if source is None:
                continue
            name, module = os.path.relpath(path, root), module_name(path, root)
            code.write(json.dumps({"text": source, "path": name, "id": module}) + "\n")
            code_docs += 1
            code_bytes += len(source.encode("utf-8"))
            for qualified, text in named_docstrings(source):
                identifier = f"{module}.{qualified}" if qualified else module
                prose.write(json.dumps({"text": text, "path": name, "id": identifier}) + "\n")
                prose_docs += 1
                prose_bytes += len(text.encode("utf-8"))
    os.replace(code_path + ".tmp", code_path)
    os.replace(prose_path + ".tmp", prose_path)
    return DemoCorpus(code_path, prose_path, code_docs, prose_docs, code_bytes, prose_bytes)


_SYSTEM_PROMPT = "You are a concise assistant for the Python standard library."


def stdlib_functions(limit: int | None = None) -> Iterator[tuple[str, str, str]]:
    """(dotted name, signature, docstring's first paragraph) of each public module-level function
    with a docstring in the first ``limit`` stdlib source files, in file order."""
    root = sysconfig.get_paths()["stdlib"]
    for path in stdlib_sources(limit):
        module = module_name(path, root)
        source = read_source(path)
        if source is None or any(part.startswith("_") for part in module.split(".")):
            continue
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                text = ast.get_docstring(node)
                if text:
                    paragraph = " ".join(text.split("\n\n")[0].split())
                    yield f"{module}.{node.name}", f"{node.name}({ast.unparse(node.args)})", paragraph


def build_sft_conversations(path: str, limit: int | None = None, max_conversations: int = 400) -> int:
    """Write a jsonl of conversations about stdlib functions; returns how many.

    A user asks what a function does and the assistant answers with its docstring's first paragraph.
    Records rotate through the shapes `prepare --format chat` detects: OpenAI ``messages`` (every
    other one with a system prompt), ShareGPT ``conversations`` and ``prompt``/``completion``;
    every fourth messages or ShareGPT record follows up asking for the function's signature.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    count = 0
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        for name, signature, answer in stdlib_functions(limit):
            if count == max_conversations:
                break
            question = f"What does `{name}` do?"
            turns = [("user", question), ("assistant", answer)]
            if count % 4 == 1:
                turns += [("user", "What is its signature?"), ("assistant", f"`{signature}`")]
            if count % 6 == 0:
                turns.insert(0, ("system", _SYSTEM_PROMPT))
            shape = count % 3
            if shape == 0:
                record: dict[str, object] = {"messages": [{"role": r, "content": c} for r, c in turns]}
            elif shape == 1:
                roles = {"system": "system", "user": "human", "assistant": "gpt"}
                record = {"conversations": [{"from": roles[r], "value": c} for r, c in turns]}
            else:
                record = {"prompt": question, "completion": answer}
            out.write(json.dumps(record) + "\n")
            count += 1
    os.replace(path + ".tmp", path)
    return count


_SECTION_CHARS = 2000


def build_documentation(path: str) -> int:
    """Write the standard library's documentation prose (``pydoc_data.topics``: the language reference
    topics ``help()`` shows) to ``path`` as jsonl, one section of at most ~2,000 characters per line
    (paragraphs kept whole); returns the number of sections."""
    from pydoc_data.topics import topics

    count = 0
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        for name in sorted(topics):
            section: list[str] = []
            for paragraph in topics[name].split("\n\n"):
                if section and sum(map(len, section)) + len(paragraph) > _SECTION_CHARS:
                    out.write(json.dumps({"text": "\n\n".join(section), "topic": name}) + "\n")
                    count += 1
                    section = []
                section.append(paragraph)
            if section:
                out.write(json.dumps({"text": "\n\n".join(section), "topic": name}) + "\n")
                count += 1
    os.replace(path + ".tmp", path)
    return count
