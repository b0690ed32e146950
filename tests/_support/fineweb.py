"""A FineWeb-style pipeline on both sides, for the equal-outputs test and benchmarks/bench_clean.py.

The corpus: web-like pages built from distinct lines of real English prose (the standard
library's docstrings and comments), in paragraphs; slices of code and one-line stubs (low
quality); German, French and Spanish pages (faker's word lists); e-mail and IPv4 addresses set in
sentences (public and private ones); exact copies and near copies (a word put first, a space
doubled) of earlier pages, each page copied at most once (a cluster of three or more keeps one
member by datatrove's union by size, which need not be the first; pairs keep their first on both
sides). Written as two jsonl files with ids.

The pipeline (FineWeb's order): language (English), Gopher repetition, Gopher quality, C4,
FineWeb quality, MinHash dedup (14 bands x 8 rows, word 5-grams), PII (e-mails, public IPv4
addresses), then tokenize. tokenport: ``prepare`` with these steps, ``compat: datatrove`` where a
step has it. datatrove: its reader, filters and writer, the four MinHash stages (signatures,
buckets, cluster, filter), its PII formatter and its tokenizer. datatrove's own language filter
needs fastText and a model download, neither available offline, so its side runs the same CLD2
detection as tokenport's ``language`` step inside a datatrove filter (same work, same decisions).
datatrove's jsonl reader and writer need orjson, which is not installed here: its side reads and
writes jsonl with the same classes, through the standard library's json instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np

TAGS = {"email": "<EMAIL>", "ipv4": "<IP_ADDRESS>"}
LANGUAGES = ["en"]
MINHASH = {"bands": 14, "rows": 8, "ngram": 5}


def tokenport_steps(dedup: bool = True) -> list[dict]:
    """The pipeline as ``prepare`` steps."""
    steps: list[dict] = [
        {"step": "language", "languages": LANGUAGES},
        {"step": "gopher_repetition", "compat": "datatrove"},
        {"step": "gopher_quality", "compat": "datatrove"},
        {"step": "c4", "compat": "datatrove"},
        {"step": "fineweb", "compat": "datatrove"},
    ]
    if dedup:
        steps.append({"step": "minhash_dedup", **MINHASH})
    steps.append({"step": "pii", "compat": "datatrove", "replacements": TAGS})
    return steps


# ---------------------------------------------------------------------------------------------
# corpus


def distinct_lines(paragraphs: Sequence[str]) -> list[str]:
    """The distinct prose lines of ``paragraphs``, in order: at least 4 words, nearly all of them
    plain words (letters, then perhaps a comma or a full stop)."""
    lines = (line.strip() for p in paragraphs for line in p.splitlines())
    return list(dict.fromkeys(line for line in lines if len(line.split()) >= 4 and _prose(line)))


def _prose(line: str) -> bool:
    words = line.split()
    return sum(word.rstrip(".,;:").isalpha() for word in words) >= 0.9 * len(words)


def _near_copy(text: str, rng: np.random.Generator, vocabulary: list[str]) -> str:
    """``text`` with a word put before its first and a space doubled: one 5-gram more, and not
    byte-equal, whatever lines the filters then drop (so that MinHash on either side joins the two
    for certain, not by chance)."""
    words = text.split(" ")
    at = int(rng.integers(1, len(words))) if len(words) > 1 else 0
    words[at] = " " + words[at]
    return vocabulary[int(rng.integers(0, len(vocabulary)))].capitalize() + " " + " ".join(words)


def _pii_sentence(fakers: dict, rng: np.random.Generator) -> str:
    en = fakers["en_US"]
    return str(
        rng.choice(
            [
                f"For questions, write to {en.email()}.",
                f"The mirror at {en.ipv4_public()} answered first.",
                f"Our gateway is {en.ipv4_private()} on the office network.",
                f"Send the signed copy to {en.email()} or to {en.company_email()}.",
            ]
        )
    )


def _page(lines: list[str], rng: np.random.Generator) -> str:
    """Paragraphs of 2-6 consecutive lines of ``lines`` (drawn at random)."""
    paragraphs = []
    for _ in range(int(rng.integers(2, 8))):
        width = int(rng.integers(2, 7))
        paragraphs.append("\n".join(lines[int(j)] for j in rng.integers(0, len(lines), width)))
    return "\n\n".join(paragraphs)


def fineweb_corpus(
    directory: str, lines: list[str], sources: Sequence[str], size: int, seed: int = 0
) -> tuple[list[str], dict[str, int]]:
    """Write about ``size`` bytes of pages (see the module docstring) to two jsonl files in
    ``directory``; the files, and how many pages of each kind were written."""
    from faker import Faker

    rng = np.random.default_rng(seed)
    fakers = {locale: Faker(locale) for locale in ("en_US", "de_DE", "fr_FR", "es_ES")}
    for k, faker in enumerate(fakers.values()):
        faker.seed_instance(seed + k)
    vocabulary = sorted({w for line in lines[:5000] for w in line.split() if w.isalpha()})
    texts: list[str] = []
    originals: list[int] = []  # pages not copied yet
    kinds: dict[str, int] = {}
    written = 0
    while written < size:
        draw = rng.random()
        if draw < 0.10 and originals:
            source = texts[originals.pop(int(rng.integers(0, len(originals))))]
            if draw < 0.05:
                kind, text = "exact copy", source
            else:
                kind, text = "near copy", _near_copy(source, rng, vocabulary)
        elif draw < 0.15:
            locale = str(rng.choice(["de_DE", "fr_FR", "es_ES"]))
            kind = "non-English"
            text = "\n\n".join(fakers[locale].paragraph(nb_sentences=12) for _ in range(int(rng.integers(2, 5))))
        elif draw < 0.22:
            source = sources[int(rng.integers(0, len(sources)))].splitlines()
            start = int(rng.integers(0, max(1, len(source) - 60)))
            kind, text = "code", "\n".join(source[start : start + int(rng.integers(20, 61))])
        elif draw < 0.25:
            kind, text = "stub", lines[int(rng.integers(0, len(lines)))]
        else:
            kind, text = "prose", _page(lines, rng)
            if rng.random() < 0.2:
                paragraphs = text.split("\n\n")
                at = int(rng.integers(0, len(paragraphs)))
                paragraphs[at] += " " + _pii_sentence(fakers, rng)
                kind, text = "prose with PII", "\n\n".join(paragraphs)
        if not text.strip():
            continue
        kinds[kind] = kinds.get(kind, 0) + 1
        if not kind.endswith("copy"):
            originals.append(len(texts))
        texts.append(text)
        written += len(text.encode("utf-8"))
    half = len(texts) // 2
    paths = []
    for part, (start, end) in enumerate(((0, half), (half, len(texts)))):
        path = os.path.join(directory, f"web-{part}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for i in range(start, end):
                f.write(json.dumps({"id": f"page-{i}", "text": texts[i]}) + "\n")
        paths.append(path)
    return paths, kinds


# ---------------------------------------------------------------------------------------------
# datatrove's side


def _cld2_filter():
    """A datatrove filter deciding as tokenport's ``language`` step does (CLD2; see the module docstring)."""
    from datatrove.pipeline.filters.base_filter import BaseFilter

    from tokenport.corpus import Document
    from tokenport.corpus.steps.language import LanguageFilter

    class CLD2LanguageFilter(BaseFilter):
        name = "CLD2 language"

        def __init__(self) -> None:
            super().__init__()
            self.step = LanguageFilter(LANGUAGES)

        def filter(self, doc):
            kept = self.step.process(Document(doc.text, doc.id))
            if kept is None:
                return False, "language"
            doc.metadata.update(kept.metadata)
            return True

    return CLD2LanguageFilter()


def _jsonl_classes():
    """datatrove's jsonl reader and writer, parsing and writing with the standard library's json."""
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    def without_orjson(cls, *args, **kwargs):  # datatrove's __new__ checks every class's dependencies
        return object.__new__(cls)

    class Reader(JsonlReader):
        __new__ = without_orjson

        def read_file(self, filepath: str):
            with self.data_folder.open(filepath, "r", compression=self.compression) as f:
                for li, line in enumerate(f):
                    with self.track_time():
                        document = self.get_document_from_dict(json.loads(line), filepath, li)
                    if document:
                        yield document

    class Writer(JsonlWriter):
        __new__ = without_orjson

        def _write(self, document: dict, file_handler, _filename: str) -> None:
            file_handler.write((json.dumps(document) + "\n").encode("utf-8"))

    return Reader, Writer


def run_datatrove(
    inputs: str, work: str, workers: int, dedup: bool = True, tokenizer: str | None = None, buckets: int = 14
) -> str:
    """Run the pipeline with datatrove over the jsonl files in ``inputs``, in folders under ``work``;
    ``workers`` tasks and processes per stage (the buckets stage: one task per band). The output
    folder: the tokenizer's files (``tokenizer``: a tokenizer.json), or jsonl files (None)."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import PIIFormatter
    from datatrove.pipeline.tokens import DocumentTokenizer

    JsonlReader, JsonlWriter = _jsonl_classes()

    def folder(name: str) -> str:
        return os.path.join(work, name)

    def execute(pipeline: list, tasks: int, name: str) -> None:
        LocalPipelineExecutor(
            pipeline, tasks=tasks, workers=workers, logging_dir=folder(f"logs-{name}"), skip_completed=False
        ).run()

    out = folder("output")
    tail = [PIIFormatter(email_replacement=TAGS["email"], ip_replacement=TAGS["ipv4"])]
    if tokenizer is None:
        tail.append(JsonlWriter(out, compression=None))
    else:
        tail.append(
            DocumentTokenizer(out, tokenizer_name_or_path=tokenizer, eos_token="<|endoftext|>", shuffle_documents=False)
        )
    filters = [
        JsonlReader(inputs),
        _cld2_filter(),
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(),
        FineWebQualityFilter(),
    ]
    if not dedup:
        execute([*filters, *tail], workers, "filter")
        return out
    config = MinhashConfig(n_grams=MINHASH["ngram"], num_buckets=MINHASH["bands"], hashes_per_bucket=MINHASH["rows"])
    execute([*filters, JsonlWriter(folder("filtered"), compression=None)], workers, "filter")
    execute(
        [JsonlReader(folder("filtered")), MinhashDedupSignature(folder("signatures"), config=config)], workers, "sigs"
    )
    execute([MinhashDedupBuckets(folder("signatures"), folder("buckets"), config=config)], buckets, "buckets")
    execute([MinhashDedupCluster(folder("buckets"), folder("remove"), config=config)], 1, "cluster")
    execute([JsonlReader(folder("filtered")), MinhashDedupFilter(folder("remove")), *tail], workers, "dedup")
    return out


def datatrove_documents(out: str) -> list[tuple[str, str]]:
    """(id, text) of the documents datatrove's jsonl writer wrote, in rank order."""
    documents = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".jsonl"):
            with open(os.path.join(out, name), encoding="utf-8") as f:
                documents += [(record["id"], record["text"]) for record in map(json.loads, f)]
    return documents


def datatrove_tokens(out: str) -> list[np.ndarray]:
    """Each document's token ids (its eos included) in the tokenizer's files, in rank order."""
    documents = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".ds"):
            tokens = np.fromfile(os.path.join(out, name), dtype=np.uint16)
            ends = np.fromfile(os.path.join(out, name + ".index"), dtype=np.uint64).astype(np.int64)
            documents += np.split(tokens, ends[:-1])
    return documents
