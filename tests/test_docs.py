"""README.md and every docs page run as written, and the site builds with warnings as errors.

Each page runs in a fresh directory: its fenced blocks in order, python blocks in one namespace per
page (later blocks use names earlier ones made), bash/sh blocks in bash with ``tokenport`` being this
checkout's ``python -m tokenport``, YAML/JSON/TOML blocks written to the file the paragraph before
them names; ``text`` blocks (shown output) are not run, nor the blocks a named rule in SKIP matches.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import tokenport

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.M | re.S)
FILE_NAME = re.compile(r"`[^`]*?([\w./-]+\.(?:ya?ml|json|toml))\b[^`]*`")
RUN = ("python", "bash", "sh")
FILES = ("yaml", "json", "toml")
SHOWN = ("text",)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language tag, its code, the prose before it and its line."""

    language: str
    code: str
    prose: str
    line: int


def blocks_of(text: str) -> list[Block]:
    """Every fenced block of ``text``, in order."""
    blocks, end = [], 0
    for match in FENCE.finditer(text):
        prose = text[end : match.start()]
        blocks.append(Block(match.group(1), match.group(2), prose, text.count("\n", 0, match.start()) + 1))
        end = match.end()
    return blocks


def page_blocks(page: str) -> list[Block]:
    return blocks_of((ROOT / page).read_text(encoding="utf-8"))


# name -> (matches a block, why it is not run)
SKIP = {
    "installs-packages": (
        lambda block: "pip install" in block.code,
        "installs packages (tests run offline in the installed environment); `tokenport demo` is "
        "tests/test_demo.py and `python -m pytest` is the suite this test is part of",
    ),
    "megatron-lm": (
        lambda block: "pretrain_gpt.py" in block.code,
        "runs inside a Megatron-LM checkout (megatron.training), which is not installed; "
        "tests/integrations/test_megatron_provider.py runs the provider on Megatron's arguments",
    ),
}


def _skip_rule(block: Block) -> str | None:
    return next((name for name, (matches, _) in SKIP.items() if matches(block)), None)


def _file_name(page: str, block: Block) -> str:
    """The file a YAML/JSON/TOML block is: the first such name in backticks in the paragraph before it."""
    paragraph = block.prose.strip().split("\n\n")[-1]
    found = FILE_NAME.search(paragraph)
    assert found, f"{page} line {block.line}: name the {block.language} block's file in the paragraph before it"
    return found.group(1)


def _run_shell(page: str, block: Block, cwd: Path) -> None:
    """Run a bash/sh block; `tokenport` is this checkout's CLI."""
    src = str(Path(tokenport.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    script = f'set -eu\ntokenport() {{ "{sys.executable}" -m tokenport "$@"; }}\n{block.code}'
    result = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (
        f"{page} line {block.line}: shell block failed\n{block.code}\n{result.stdout}\n{result.stderr}"
    )


def run_blocks(page: str, blocks: list[Block], cwd: Path) -> int:
    """Run ``blocks`` of ``page`` in ``cwd`` (the current directory); the number of blocks run."""
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    for block in blocks:
        if _skip_rule(block) or block.language in SHOWN:
            continue
        if block.language in FILES:
            (cwd / _file_name(page, block)).write_text(block.code, encoding="utf-8")
        elif block.language in ("bash", "sh"):
            _run_shell(page, block, cwd)
        else:  # a traceback names the page's own line numbers
            exec(compile("\n" * block.line + block.code, page, "exec"), namespace)
        ran += 1
    return ran


# --- optional packages: the tour extra, or an extra the page says to install --------------------
# Read from the snippets' text, not from sys.modules after running them: numba's extension scan and
# torch import optional packages of the environment on their own, at moments that vary from run to run.

PYPROJECT = ROOT / "pyproject.toml"
# extras tokenport uses when installed and does without (a faster checksum, a faster tokenizer engine)
ACCELERATORS = ("fast", "gigatoken")
# what a snippet's text asks of an optional package: (text in a python or shell block, the distribution)
TEXT_NEEDS = (
    (".yaml", "pyyaml"),
    (".yml", "pyyaml"),
    ("--plot", "matplotlib"),
    ("--executor ray", "ray"),
    ("s3://", "s3fs"),
    ("hf:", "tokenizers"),
    ("tiktoken:", "tiktoken"),
    ("sentencepiece:", "sentencepiece"),
    (".parquet", "pyarrow"),
    ("step: language", "pycld2"),
)
COMMENT = re.compile(r"(^|\s)#\s.*$", re.M)


def _extras() -> dict[str, list[Requirement]]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    table = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return {name: [Requirement(text) for text in texts] for name, texts in table.items()}


def extra_closure(extras: dict[str, list[Requirement]], *names: str) -> set[str]:
    """The distributions the extras ``names`` name, tokenport's own extras expanded."""
    seen, todo, out = set(), list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in extras[name]:
            if requirement.name == "tokenport":
                todo.extend(requirement.extras)
            else:
                out.add(canonicalize_name(requirement.name))
    return out


def distributions_used(blocks: list[Block]) -> set[str]:
    """The distributions of the modules the python blocks import, and those their text asks for."""
    modules, used = set(), set()
    for block in blocks:
        if block.language not in RUN or _skip_rule(block):
            continue
        if block.language == "python":
            for node in ast.walk(ast.parse(block.code)):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.partition(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    modules.add(node.module.partition(".")[0])
        code = COMMENT.sub("", block.code)
        used.update(dist for text, dist in TEXT_NEEDS if text in code)
    dists = packages_distributions()
    return used | {canonicalize_name(d) for module in modules for d in dists.get(module, [])}


def optional_outside_tour(page: str) -> set[str]:
    """The optional distributions ``page``'s snippets use that neither the `tour` extra nor an extra the
    page names (``tokenport[EXTRA]``) installs."""
    extras = _extras()
    optional = extra_closure(extras, *(name for name in extras if name not in ("dev", "all", *ACCELERATORS)))
    named = re.findall(r"tokenport\[([\w,]+)\]", (ROOT / page).read_text(encoding="utf-8"))
    allowed = extra_closure(extras, "tour", *(e for group in named for e in group.split(",") if e in extras))
    return {dist for dist in distributions_used(page_blocks(page)) if dist in optional and dist not in allowed}


# --- the tests ------------------------------------------------------------------------------------


def test_every_block_is_run_written_shown_or_skipped_by_a_named_rule():
    every = {page: page_blocks(page) for page in PAGES}
    for page, blocks in every.items():
        for block in blocks:
            assert block.language in RUN + FILES + SHOWN, (
                f"{page} line {block.line}: tag the block with one of {RUN + FILES + SHOWN}"
            )
            if block.language in FILES and not _skip_rule(block):
                _file_name(page, block)
    for name, (matches, _) in SKIP.items():
        assert any(matches(b) for blocks in every.values() for b in blocks), f"skip rule {name!r} matches no block"


BUCKET = re.compile(r"s3://([a-z0-9][a-z0-9.-]+)/")


@pytest.mark.parametrize("page", PAGES)
def test_page_runs_as_written(page, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOKENPORT_CACHE_DIR", str(tmp_path / ".cache"))
    blocks = page_blocks(page)
    buckets = {name for block in blocks if block.language in RUN for name in BUCKET.findall(block.code)}
    if buckets:  # the page's s3:// URLs reach the tests' moto server
        s3 = request.getfixturevalue("s3")
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
        _empty_buckets(s3.client, buckets)
    run_blocks(page, blocks, tmp_path)


def _empty_buckets(client, names: set[str]) -> None:
    """Make each bucket exist and hold nothing, as a fresh directory does for a page's local files."""
    existing = {bucket["Name"] for bucket in client.list_buckets()["Buckets"]}
    for name in sorted(names):
        if name not in existing:
            client.create_bucket(Bucket=name)
        for item in client.list_objects_v2(Bucket=name).get("Contents", []):
            client.delete_object(Bucket=name, Key=item["Key"])


@pytest.mark.parametrize("page", PAGES)
def test_page_needs_the_tour_extra_or_names_its_own(page):
    """A newcomer installs the tour extra: a snippet that needs more says which extra to install."""
    outside = optional_outside_tour(page)
    assert not outside, (
        f"{page}: its snippets use {sorted(outside)}, which the tour extra does not install: "
        "add the extra to `tour` in pyproject.toml, or say on the page which `pip install 'tokenport[EXTRA]'` it needs"
    )


def test_readme_is_short_and_keeps_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150, "README.md: keep it short; move the detail to a docs page"
    assert 'python3 -m pip install -e ".[tour]" torch==2.13.0 -c constraints.txt && tokenport demo' in readme
    # .ci/run runs the test command verbatim
    assert 'python -m pip install -e ".[dev]" torch==2.13.0 -c constraints.txt && python -m pytest' in readme


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """As CI builds it: `mkdocs build --strict` (every nav page present, the API reference's docstrings
    and cross-references resolved, the CLI reference generated from the parser)."""
    pytest.importorskip("mkdocs")
    yaml = pytest.importorskip("yaml")
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    missing = [page for page in _nav_pages(nav) if page != CLI_PAGE and not (ROOT / "docs" / page).exists()]
    assert not missing, f"mkdocs.yml's nav lists pages that docs/ lacks: {missing}"
    src = str(ROOT / "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    env["NO_MKDOCS_2_WARNING"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert all(f'id="tokenport-{verb}"' in cli for verb in ("prepare", "report", "inspect", "merge", "trace"))


CLI_PAGE = "reference/cli.md"  # generated by docs/hooks.py at build time


def test_the_api_reference_documents_every_public_name():
    """docs/reference/api.md has a `::: tokenport.NAME` for each name the root exports, and no other."""
    text = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    documented = re.findall(r"^::: tokenport\.(\w+)$", text, re.M)
    exported = sorted(set(tokenport.__all__) - {"__version__"})
    assert len(documented) == len(set(documented)), "docs/reference/api.md documents a name twice"
    assert sorted(documented) == exported, (
        "docs/reference/api.md: add `::: tokenport.NAME` under its group for "
        f"{sorted(set(exported) - set(documented))}; remove {sorted(set(documented) - set(exported))}"
    )


def _nav_pages(nav) -> list[str]:
    """The page files a mkdocs nav names, in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return [page for item in nav for page in _nav_pages(item)]


# --- getting started on other data, as a newcomer brings it ---------------------------------------

OTHER_DATA = """
import json

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

texts = [("Grüße aus Köln — 東京の天気は晴れです。 " * (i % 7 + 1)) + f"Dokument {i} 🙂 ünïcødé" for i in range(150)]
texts += texts[:10]
texts.append("Schreiben Sie an grete@example.org oder rufen Sie 555-987-6543 an.")
with open("my.jsonl", "w", encoding="utf-8") as file:
    for i, text in enumerate(texts):
        file.write(json.dumps({"text": text, "id": i}, ensure_ascii=False) + "\\n")
        if i % 25 == 0:
            file.write("\\n")                                  # blank lines between records
bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
bpe.decoder = decoders.ByteLevel()
bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=900, special_tokens=["<s>", "</s>", "<pad>"],
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
bpe.save("tokenizer.json")
"""


def test_getting_started_on_other_data(tmp_path, monkeypatch):
    """getting-started.md's commands, unedited, on another jsonl (unicode, blank lines, another field
    beside "text") and another tokenizer.json (another vocabulary size, `</s>` as end of document)."""
    monkeypatch.chdir(tmp_path)
    page = "docs/getting-started.md"
    blocks = page_blocks(page)
    makers = [i for i, b in enumerate(blocks) if "my.jsonl" in b.code and 'save("tokenizer.json")' in b.code]
    assert len(makers) == 1, f"{page}: one block makes my.jsonl and tokenizer.json to follow along with"
    blocks[makers[0]] = Block("python", OTHER_DATA, "", blocks[makers[0]].line)
    run_blocks(page, blocks, tmp_path)
    assert (tmp_path / "report.html").exists() and (tmp_path / "loader-state.json").exists()
    from tokenizers import Tokenizer

    assert Tokenizer.from_file("tokenizer.json").get_vocab_size() > 400  # it was the other tokenizer
