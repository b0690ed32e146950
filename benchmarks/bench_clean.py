"""tokenport.prepare cleaning steps: quality filters and MinHash against datatrove, and fuzzy dedup end to end.

Corpus: real English text from the Python standard library on this machine. Web-like pages are
built per module from its docstrings and comment paragraphs (runs of ``#`` lines), joined by
blank lines into pages of a lognormal number of words (aiming at ~300; a module may have fewer, so
the pages average ~180 words, median ~140); one page in eight is instead
a 20-60 line slice of the module's code, the kind of page the filters exist to drop. The same
texts go to both sides; each side runs in this one process on one core (docs/s = per core).

    python benchmarks/bench_clean.py            # 1,000 pages; dedup of 10^6 docs (~4 minutes)
    python benchmarks/bench_clean.py --quick    # 200 pages; dedup of 10^4 docs (under a minute)
    python benchmarks/bench_clean.py --skip filters,minhash --dedup-docs 100000   # one section only
    python benchmarks/bench_clean.py --skip filters,minhash,dedup --fineweb-mb 24   # the FineWeb pipeline only

Needs ``pip install datatrove nltk "xxhash<4" spacy``: datatrove 0.10.1 splits English words
with spaCy's blank English tokenizer (``spacy.blank("en")`` plus its rule-based sentencizer; no
model download). nltk's punkt data cannot be downloaded here, and English does not use it.

Rows:
  filters      docs/s of each step over the same pages, timed in turns (A B A B ...), best of N:
               tokenport ``list(step(documents))`` with ``Document``s vs datatrove
               ``list(filter.run(documents))`` with its ``Document``s (made fresh, untimed, before
               each call: its C4 filter rewrites ``doc.text``). GopherQuality, GopherRepetition,
               C4Quality, FineWebQuality each alone, then all four chained in that order (datatrove's
               word splitting keeps the last 5 texts' words in an lru_cache, so its chained filters
               split each page once, as in its own pipelines).
               Goal: >= 10x datatrove's docs/s per core. The agreement of each filter's
               keep/drop decisions on the same pages is printed (the word splitting differs:
               a regular expression here, spaCy's tokenizer there).
  filters, compat  the same, each step built with ``compat="datatrove"`` (datatrove's decisions:
               spaCy's English tokenization reproduced, datatrove's reading of each rule); its
               agreement with datatrove is printed (goal: >= 99.5%). Timed cold: the caches of
               words already split are emptied before every timed call, so each run pays for
               splitting every distinct word of the pages anew (a long run reuses them; the warm
               figure is printed too). Goal: >= 5x datatrove's docs/s per core.
  minhash      docs/s over the same pages, 14 bands x 8 rows (112 hashes), word 5-grams, both sides.
               "signature": tokenport ``MinHasher.signature(text)`` vs datatrove
               ``MinhashDedupSignature.get_signature(get_shingles(text))`` (its own methods: text
               normalization, spaCy words, xxhash64 of each 5-gram, numpy min over the (a*x+b) mod
               2^61-1 permutations); goal >= 5x. "step": the whole first pass, tokenport's
               band-key row of every document (what prepare's minhash_dedup pass 1 computes)
               saved as one .npy, vs datatrove's ``MinhashDedupSignature.run`` on a list of its
               Documents, which writes the 14 bucket files to a local folder and sorts them (no goal).
  dedup        ``prepare(PrepareConfig(inputs=[corpus.jsonl], workers=2, tokenizer="byte",
               steps=[{"step": "minhash_dedup"}]))`` run once in a fresh subprocess: wall time and
               peak memory: the larger of the summed RSS of that process and its worker (sampled
               every 0.1 s from /proc) and the largest single process's max RSS (wait4, exact;
               a spike shorter than 0.1 s can escape the sampling). An original document is 1-4
               paragraphs of 2-5 lines drawn at random from the distinct lines (>= 4 words) of the standard
               library's docstrings and comments (~500 bytes); 5% of the documents are exact copies
               and 10% near copies (about one word in 40 deleted, replaced or inserted) of an
               earlier one. The output (byte tokenizer) is decoded and matched back to the input, so
               the rows say which kinds were removed. Full run: 10^6 docs (~70 s here); --quick:
               10^4. No peer and no goal: the figure for this machine.
  fineweb e2e  A FineWeb-style pipeline end to end, jsonl in to tokens written, each side in a fresh
               process with the same worker count (1 and 2), same data, same tokenizer (a byte-level
               BPE trained here): language (CLD2 on both sides: datatrove's fastText model cannot
               be downloaded here), Gopher repetition and quality, C4, FineWeb quality, MinHash
               dedup (14x8, 5-grams), PII (e-mails, public IPv4), tokenize. tokenport: ``tokenport
               prepare --steps`` (``compat: datatrove``); datatrove: its executor running its reader,
               filters and writer, MinHash signatures, buckets (14 tasks), cluster and filter stages,
               PII formatter and DocumentTokenizer (no shuffling). The corpus and datatrove's stages
               are tests/_support/fineweb.py's. The outputs must be equal (same documents, same
               token ids) or the script fails. Rows with and without the dedup steps. Goal: >= 5x
               (with dedup). Full run: 24 MB; --quick: 1 MB (one worker, then two).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter

import numpy as np

from _harness import Row, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.corpus import Document
from tokenport.corpus.steps.dedup import MinHashDedup
from tokenport.corpus.steps.minhash import MinHasher
from tokenport.corpus.steps.quality import C4Quality, FineWebQuality, GopherQuality, GopherRepetition
from tokenport.demo.corpus import docstrings, read_source, stdlib_sources

_COMMENT_LINE = re.compile(r"^\s*#\s?(.*)$")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------
# corpus


def stdlib_modules() -> list[str]:
    """Source text of every standard library module (tests and third-party packages excluded)."""
    return [s for s in (read_source(path) for path in stdlib_sources()) if s]


def comment_paragraphs(source: str) -> list[str]:
    """Runs of consecutive ``#`` comment lines (shebangs and coding lines aside), as paragraphs of
    at least 8 words."""
    paragraphs, current = [], []
    for line in source.splitlines():
        match = _COMMENT_LINE.match(line)
        if match and not line.startswith("#!") and "coding" not in line[:30]:
            current.append(match.group(1).rstrip())
        else:
            if current:
                text = "\n".join(current).strip()
                if len(text.split()) >= 8:
                    paragraphs.append(text)
            current = []
    return paragraphs


def module_paragraphs(source: str) -> list[str]:
    """A module's prose: its docstrings, then its comment paragraphs."""
    return list(docstrings(source)) + comment_paragraphs(source)


def web_pages(modules: list[str], prose: list[list[str]], count: int, seed: int) -> list[str]:
    """`count` web-like pages (see the module docstring): prose pages of consecutive paragraphs of
    one module (`prose[m]` are module m's), ~300 words on average, and one in eight a slice of code."""
    rng = np.random.default_rng(seed)
    pages: list[str] = []
    order = rng.permutation(len(modules))
    targets = lognormal_lengths(rng, count, 300, 0.6)
    k = 0
    while len(pages) < count:
        m = int(order[k % len(order)])
        k += 1
        source, paragraphs = modules[m], prose[m]
        if rng.random() < 1 / 8:
            lines = source.splitlines()
            if len(lines) > 60:
                start = int(rng.integers(0, len(lines) - 60))
                pages.append("\n".join(lines[start : start + int(rng.integers(20, 61))]))
            continue
        if not paragraphs:
            continue
        start = int(rng.integers(0, len(paragraphs)))
        target = int(targets[len(pages)])
        chosen, words = [], 0
        for paragraph in paragraphs[start:] + paragraphs[:start]:
            chosen.append(paragraph)
            words += len(paragraph.split())
            if words >= target:
                break
        pages.append("\n\n".join(chosen))
    return pages


def dedup_corpus(path: str, prose: list[list[str]], count: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Write `count` jsonl documents; each original is 1-4 paragraphs of 2-5 lines drawn at random
    from the distinct lines (of 4 words or more) of `prose`, so that two originals are almost
    never alike; 5% are exact copies and 10% edited copies (`near_copy`) of an earlier document.
    Returns the texts and each one's kind: 0 original, 1 exact copy, 2 near copy."""
    rng = np.random.default_rng(seed)
    pool = list(
        dict.fromkeys(
            line.strip()
            for paragraphs in prose
            for p in paragraphs
            for line in p.splitlines()
            if len(line.split()) >= 4
        )
    )
    vocabulary = sorted({w for line in pool[:5000] for w in line.split() if w.isalpha()})
    draw = rng.random(count)
    kinds = np.where(draw < 0.05, 1, np.where(draw < 0.15, 2, 0)).astype(np.int8)
    kinds[0] = 0
    lines = rng.integers(0, len(pool), (count, 4, 5))
    paragraphs, widths = rng.integers(1, 5, count), rng.integers(2, 6, (count, 4))
    texts: list[str] = []
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for i in range(count):
            if kinds[i]:
                source = texts[int(rng.integers(0, i))]
                text = source if kinds[i] == 1 else near_copy(source, rng, vocabulary)
            else:
                text = "\n\n".join(
                    "\n".join(pool[j] for j in lines[i, k, : widths[i, k]]) for k in range(paragraphs[i])
                )
            texts.append(text)
            f.write(json.dumps({"text": text}) + "\n")
    os.replace(path + ".tmp", path)
    return texts, kinds


def kept_mask(texts: list[str], parts: list[str]) -> np.ndarray:
    """Which input documents survive in the output stores (byte tokenizer: ids are the UTF-8
    bytes, then eod). Kept documents keep their order, and a dedup cluster keeps its first member,
    so matching the output in order against the input finds each one."""
    from tokenport.indexed import IndexedDataset

    kept = np.zeros(len(texts), dtype=bool)
    i = 0
    for prefix in parts:
        with IndexedDataset(prefix) as dataset:
            for d in range(len(dataset)):
                text = bytes(np.asarray(dataset[d][:-1], dtype=np.uint8)).decode("utf-8")
                while texts[i] != text:
                    i += 1
                kept[i] = True
                i += 1
    return kept


def near_copy(text: str, rng: np.random.Generator, vocabulary: list[str]) -> str:
    """`text` with about one word in 40 (at least one) deleted, replaced or inserted."""
    words = text.split(" ")
    for _ in range(max(1, len(words) // 40)):
        at = int(rng.integers(0, len(words)))
        action = rng.integers(0, 3)
        if action == 0 and len(words) > 1:
            del words[at]
        elif action == 1:
            words[at] = vocabulary[int(rng.integers(0, len(vocabulary)))]
        else:
            words.insert(at, vocabulary[int(rng.integers(0, len(vocabulary)))])
    return " ".join(words)


# ---------------------------------------------------------------------------------------------
# filters


def datatrove_filters():
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    return {
        "Gopher quality": GopherQualityFilter,
        "Gopher repetition": GopherRepetitionFilter,
        "C4": C4QualityFilter,
        "FineWeb": FineWebQualityFilter,
    }


OURS = {
    "Gopher quality": GopherQuality,
    "Gopher repetition": GopherRepetition,
    "C4": C4Quality,
    "FineWeb": FineWebQuality,
}


def ours_decision(name: str, step, text: str) -> tuple[bool, str | None]:
    if name == "C4":
        _, reason = step.clean(text)
    else:
        reason = step.reject(text)
    return reason is None, reason


def theirs_decision(step, document) -> tuple[bool, str | None]:
    result = step.filter(document)
    return (result, None) if isinstance(result, bool) else (bool(result[0]), result[1])


def bench_filters(rows: list[Row], pages: list[str], args) -> None:
    from datatrove.data import Document as DTDocument

    theirs_classes = datatrove_filters()
    ours_docs = [Document(text, str(i)) for i, text in enumerate(pages)]
    fresh: list = []

    def make_theirs_docs() -> None:
        fresh[:] = [DTDocument(text=text, id=str(i)) for i, text in enumerate(pages)]

    make_theirs_docs()
    for step in theirs_classes.values():  # warm: spaCy's blank English loads on first use
        list(step().run(iter(fresh[:20])))
    case = f"{len(pages):,} pages"
    print(f"  filters: agreement of keep/drop on the same {len(pages):,} pages")
    for name in OURS:
        # agreement, document by document
        ours_step, theirs_step = OURS[name](), theirs_classes[name]()
        make_theirs_docs()
        ours = [ours_decision(name, ours_step, text) for text in pages]
        theirs = [theirs_decision(theirs_step, doc) for doc in fresh]
        same = sum(a[0] == b[0] for a, b in zip(ours, theirs))
        kept_o, kept_t = sum(a[0] for a in ours), sum(b[0] for b in theirs)
        only_o = Counter(b[1] for a, b in zip(ours, theirs) if a[0] and not b[0])
        only_t = Counter(a[1] for a, b in zip(ours, theirs) if b[0] and not a[0])
        line = (
            f"    {name}: {100 * same / len(pages):.1f}% agree; kept {kept_o:,} (tokenport) vs {kept_t:,} (datatrove)"
        )
        if only_o:
            line += "; kept only by tokenport (datatrove's reason): " + ", ".join(
                f"{r} {n}" for r, n in only_o.most_common(4)
            )
        if only_t:
            line += "; kept only by datatrove (tokenport's reason): " + ", ".join(
                f"{r} {n}" for r, n in only_t.most_common(4)
            )
        print(line, flush=True)
        if name == "C4":
            both = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a[0] and b[0]]
            c4 = C4Quality()
            equal = sum(c4.clean(pages[i])[0] == fresh[i].text for i in both)
            print(f"    C4: of {len(both):,} pages both keep, {equal:,} have the same cleaned text", flush=True)

        t_ours, t_theirs = best_of_each(
            [lambda: list(OURS[name]()(ours_docs)), lambda: list(theirs_classes[name]().run(iter(fresh)))],
            args.repeat,
            [None, make_theirs_docs],
        )
        rows.append(
            Row(
                "filter docs/s",
                f"{name}, {case}",
                "docs/s",
                len(pages) / t_ours,
                len(pages) / t_theirs,
                f"datatrove {name}",
                10.0,
            )
        )

    bench_compat_filters(rows, pages, args, ours_docs, theirs_classes, fresh, make_theirs_docs)

    def ours_chain():
        documents = iter(ours_docs)
        for cls in OURS.values():
            documents = cls()(documents)
        return list(documents)

    def theirs_chain():
        documents = iter(fresh)
        for cls in theirs_classes.values():
            documents = cls().run(documents)
        return list(documents)

    make_theirs_docs()
    kept_o, kept_t = len(ours_chain()), len(theirs_chain())
    print(f"    all four chained: kept {kept_o:,} (tokenport) vs {kept_t:,} (datatrove)", flush=True)
    t_ours, t_theirs = best_of_each([ours_chain, theirs_chain], args.repeat, [None, make_theirs_docs])
    rows.append(
        Row(
            "filter docs/s",
            f"all 4 chained, {case}",
            "docs/s",
            len(pages) / t_ours,
            len(pages) / t_theirs,
            "datatrove, same chain",
            10.0,
        )
    )


def bench_compat_filters(
    rows: list[Row], pages: list[str], args, ours_docs, theirs_classes, fresh, make_theirs_docs
) -> None:
    from tokenport.corpus.steps import datatrove_compat
    from tokenport.corpus.steps.spacy_words import english_words

    def cold() -> None:
        english_words().clear_cache()
        datatrove_compat.clear_cache()

    case = f"{len(pages):,} pages, compat=datatrove"
    for name in OURS:
        ours_step, theirs_step = OURS[name](compat="datatrove"), theirs_classes[name]()
        make_theirs_docs()
        ours = [ours_decision(name, ours_step, text) for text in pages]
        theirs = [theirs_decision(theirs_step, doc) for doc in fresh]
        differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a[0] != b[0]]
        line = f"    {name}, compat=datatrove: {100 * (1 - len(differ) / len(pages)):.2f}% agree ({len(differ)} differ)"
        if name == "C4":
            both = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a[0] and b[0]]
            c4 = C4Quality(compat="datatrove")
            line += (
                f"; same cleaned text on {sum(c4.clean(pages[i])[0] == fresh[i].text for i in both):,} of {len(both):,}"
            )
        print(line, flush=True)
        rows.append(
            Row(
                "filter agreement",
                f"{name}, {case}",
                "% same keep/drop",
                100 * (1 - len(differ) / len(pages)),
                100.0,
                "datatrove (itself)",
            )
        )

        def ours_run():
            return list(OURS[name](compat="datatrove")(ours_docs))

        def theirs_run():
            return list(theirs_classes[name]().run(iter(fresh)))

        t_cold, t_warm, t_theirs = best_of_each(
            [ours_run, ours_run, theirs_run], args.repeat, [cold, None, make_theirs_docs]
        )
        rows.append(
            Row(
                "filter docs/s",
                f"{name}, {case}, cold",
                "docs/s",
                len(pages) / t_cold,
                len(pages) / t_theirs,
                f"datatrove {name}",
                5.0,
            )
        )
        rows.append(
            Row(
                "filter docs/s",
                f"{name}, {case}, warm",
                "docs/s",
                len(pages) / t_warm,
                len(pages) / t_theirs,
                f"datatrove {name}",
            )
        )


# ---------------------------------------------------------------------------------------------
# minhash


def bench_minhash(rows: list[Row], pages: list[str], directory: str, args) -> None:
    from datatrove.data import Document as DTDocument
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature

    hasher = MinHasher(bands=14, rows=8, ngram=5)
    theirs = MinhashDedupSignature(
        output_folder=os.path.join(directory, "dt-sigs-warm"),
        config=MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8),
    )
    hasher.signature(pages[0])  # warm (load numba's cache)
    theirs.get_signature(theirs.get_shingles(pages[0]))

    def ours_signatures():
        return [hasher.signature(text) for text in pages]

    def theirs_signatures():
        out = []
        for text in pages:
            shingles = theirs.get_shingles(text)
            if shingles.size:  # as its step does: documents without a 5-gram get no signature
                out.append(theirs.get_signature(shingles))
        return out

    case = f"{len(pages):,} pages, 14x8"
    t_ours, t_theirs = best_of_each([ours_signatures, theirs_signatures], args.repeat)
    rows.append(
        Row(
            "minhash docs/s",
            f"signature, {case}",
            "docs/s",
            len(pages) / t_ours,
            len(pages) / t_theirs,
            "datatrove get_signature",
            5.0,
        )
    )

    signer = MinHashDedup().sign
    fresh: list = []
    runs = iter(range(10**9))

    def make_theirs_docs() -> None:
        fresh[:] = [DTDocument(text=text, id=str(i)) for i, text in enumerate(pages)]

    def ours_step():
        keys = np.stack([signer(text) for text in pages])
        np.save(os.path.join(directory, "ours.keys.npy"), keys)

    def theirs_step():
        step = MinhashDedupSignature(
            output_folder=os.path.join(directory, f"dt-sigs-{next(runs)}"),
            config=MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8),
        )
        step.run(iter(fresh), rank=0, world_size=1)

    t_ours, t_theirs = best_of_each([ours_step, theirs_step], args.repeat, [None, make_theirs_docs])
    rows.append(
        Row(
            "minhash docs/s",
            f"step with output, {case}",
            "docs/s",
            len(pages) / t_ours,
            len(pages) / t_theirs,
            "datatrove MinhashDedupSignature.run",
        )
    )


# ---------------------------------------------------------------------------------------------
# end-to-end fuzzy dedup

_PREPARE = (
    "import json, sys; from tokenport.corpus import PrepareConfig, prepare; "
    "r = prepare(PrepareConfig(inputs=[sys.argv[1]], output=sys.argv[2], workers=2, tokenizer='byte', "
    "steps=[{'step': 'minhash_dedup'}])); "
    "print(json.dumps({'documents': r.documents, 'tokens': r.tokens, 'bytes_in': r.bytes_in, "
    "'seconds': r.seconds, 'steps': r.steps, 'parts': list(r.parts)}))"
)


def tree_rss(pid: int) -> int:
    """Summed resident set size, in bytes, of `pid` and its descendants (0 when gone)."""
    total, stack = 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * page
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            pass
    return total


def run_prepare(corpus: str, output: str) -> tuple[dict, float, int, int]:
    """(result, wall seconds, peak summed RSS of the process tree, largest single max RSS), in bytes."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen([sys.executable, "-c", _PREPARE, corpus, output], stdout=out)
        peak = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, tree_rss(process.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            raise SystemExit(f"prepare failed with exit code {process.returncode}")
        out.seek(0)
        result = json.loads(out.read().decode().strip().splitlines()[-1])
    return result, wall, peak, usage.ru_maxrss * 1024  # wait4: the max over it and its reaped children


def bench_dedup(rows: list[Row], prose: list[list[str]], directory: str, args) -> None:
    corpus = os.path.join(directory, f"dedup-{args.dedup_docs}.jsonl")
    t0 = time.perf_counter()
    texts, kinds = dedup_corpus(corpus, prose, args.dedup_docs, args.seed)
    size = os.path.getsize(corpus)
    planted = np.bincount(kinds, minlength=3)
    print(
        f"  dedup corpus: {args.dedup_docs:,} docs, {size / 1e6:,.1f} MB: {planted[0]:,} originals, {planted[1]:,} "
        f"exact copies, {planted[2]:,} near copies (written in {time.perf_counter() - t0:.1f} s)",
        flush=True,
    )
    result, wall, peak, largest = run_prepare(corpus, os.path.join(directory, "dedup-out"))
    counts = next((c for label, c in result["steps"].items() if label.endswith("minhash_dedup")), {})
    removed = counts.get("removed:duplicate", 0)
    print(
        f"  dedup: wall {wall:.1f} s (prepare's own figure {result['seconds']:.1f} s), "
        f"{args.dedup_docs / wall:,.0f} docs/s; peak memory {peak / 2**20:,.0f} MiB summed over the 2 processes "
        f"(largest single process max RSS {largest / 2**20:,.0f} MiB); {result['tokens']:,} tokens out",
        flush=True,
    )
    kept = kept_mask(texts, result["parts"])
    gone = ~kept
    print(
        f"  dedup: removed {removed:,} of {args.dedup_docs:,} ({int(gone.sum()):,} missing from the output): "
        f"exact copies {int(gone[kinds == 1].sum()):,} of {planted[1]:,}, near copies {int(gone[kinds == 2].sum()):,} "
        f"of {planted[2]:,}, originals {int(gone[kinds == 0].sum()):,} of {planted[0]:,} (false positives: "
        f"originals share no more than a chance line)",
        flush=True,
    )
    case = f"{args.dedup_docs:,} docs, {size / 1e6:,.0f} MB, 2 workers"
    rate = args.dedup_docs / wall
    rows.append(Row("dedup e2e", case, "s", wall, wall, "(no peer)"))
    rows.append(Row("dedup e2e", case, "docs/s", rate, rate, "(no peer)"))
    peak = max(peak, largest)
    rows.append(Row("dedup e2e", case, "MB", peak / 1e6, peak / 1e6, "(no peer) peak RSS"))
    rows.append(
        Row(
            "dedup e2e",
            case,
            "% near copies removed",
            100 * gone[kinds == 2].mean(),
            100 * gone[kinds == 1].mean(),
            "% exact copies removed",
        )
    )
    if args.dedup_docs < 10**6:
        rows.append(Row("dedup e2e", "10^6 docs, extrapolated linearly", "s", 10**6 / rate, 10**6 / rate, "(no peer)"))


# ---------------------------------------------------------------------------------------------
# FineWeb-style pipeline end to end


def _fineweb():
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    from tests._support import fineweb

    return fineweb


def _datatrove_side(argv: list[str]) -> None:
    """``--datatrove-run INPUTS WORK WORKERS DEDUP TOKENIZER``: datatrove's side, in this fresh process."""
    from loguru import logger

    logger.disable("datatrove")
    inputs, work, workers, dedup, tokenizer = argv
    _fineweb().run_datatrove(inputs, work, int(workers), dedup == "1", tokenizer)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_child(command: list[str], cpu: list[float]) -> str:
    """Run ``command``; its stdout. Adds the CPU seconds it and its children used to ``cpu``."""
    before = _children_cpu()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    cpu.append(_children_cpu() - before)
    return done.stdout


def _ours(paths: list[str], output: str, tokenizer: str, workers: int, steps: str, cpu: list[float]) -> list[str]:
    """``tokenport prepare`` in a fresh process; the store prefixes it wrote."""
    command = [sys.executable, "-m", "tokenport", "prepare", *paths, "-o", output, "--tokenizer", f"hf:{tokenizer}"]
    command += ["--workers", str(workers), "--steps", steps, "-q", "--json"]
    return json.loads(_run_child(command, cpu))["parts"]


def _theirs(inputs: str, work: str, tokenizer: str, workers: int, dedup: bool, cpu: list[float]) -> str:
    command = [sys.executable, os.path.abspath(__file__), "--datatrove-run", inputs, work, str(workers)]
    _run_child([*command, "1" if dedup else "0", tokenizer], cpu)
    return os.path.join(work, "output")


def _store_tokens(parts: list[str]) -> list[np.ndarray]:
    from tokenport.indexed import IndexedDataset

    documents = []
    for prefix in parts:
        with IndexedDataset(prefix) as dataset:
            documents += [np.asarray(dataset[d], dtype=np.int64) for d in range(len(dataset))]
    return documents


def _check_equal(ours: list[np.ndarray], theirs: list[np.ndarray], case: str) -> None:
    """Fail unless both sides wrote the same documents with the same token ids, in the same order."""
    differ = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if not np.array_equal(a, b)), None)
    if len(ours) != len(theirs) or differ is not None:
        raise SystemExit(
            f"fineweb e2e, {case}: outputs differ: {len(ours):,} documents (tokenport) vs {len(theirs):,} "
            f"(datatrove); first differing document: {differ}"
        )
    print(f"    {case}: outputs equal: {len(ours):,} documents, {sum(map(len, ours)):,} tokens", flush=True)


def bench_fineweb(rows: list[Row], modules: list[str], prose: list[list[str]], directory: str, args) -> None:
    fineweb = _fineweb()
    from tests._support.bpe import train_byte_level_bpe

    inputs = os.path.join(directory, "fineweb-in")
    os.makedirs(inputs, exist_ok=True)
    lines = fineweb.distinct_lines([p for paragraphs in prose for p in paragraphs])
    paths, kinds = fineweb.fineweb_corpus(inputs, lines, modules, int(args.fineweb_mb * 1e6), args.seed)
    size = sum(os.path.getsize(path) for path in paths)
    print(
        f"  fineweb corpus (the rows' data): {size / 1e6:.1f} MB in 2 files, {sum(kinds.values()):,} pages: {kinds}",
        flush=True,
    )
    tokenizer = train_byte_level_bpe(lines[:20000], 8000, os.path.join(directory, "fineweb-tokenizer.json"))
    runs = iter(range(10**6))
    for dedup, workers in args.fineweb_cases:
        steps = os.path.join(directory, f"fineweb-steps-{int(dedup)}.json")
        with open(steps, "w", encoding="utf-8") as f:
            json.dump(fineweb.tokenport_steps(dedup), f)
        outputs: dict[str, object] = {}
        cpu: dict[str, list[float]] = {"ours": [], "theirs": []}

        def ours() -> None:
            output = os.path.join(directory, f"fw-ours-{next(runs)}")
            outputs["ours"] = _ours(paths, output, tokenizer, workers, steps, cpu["ours"])

        def theirs() -> None:
            work = os.path.join(directory, f"fw-theirs-{next(runs)}")
            outputs["theirs"] = _theirs(inputs, work, tokenizer, workers, dedup, cpu["theirs"])

        t_ours, t_theirs = best_of_each([ours, theirs], args.fineweb_repeat)
        case = f"FineWeb pipeline, {workers} worker{'s' if workers > 1 else ''}" + ("" if dedup else ", no dedup")
        _check_equal(_store_tokens(outputs["ours"]), fineweb.datatrove_tokens(outputs["theirs"]), case)
        line = f"    {case}: wall tokenport {t_ours:.2f} s, datatrove {t_theirs:.2f} s"
        if workers == 1:  # datatrove's process pools are never waited for: their CPU is not counted
            line += (
                f"; CPU (user + system, least) tokenport {min(cpu['ours']):.2f} s, datatrove {min(cpu['theirs']):.2f} s"
            )
        print(line, flush=True)
        rows.append(
            Row(
                "fineweb e2e",
                case,
                "s",
                t_ours,
                t_theirs,
                "datatrove, same pipeline",
                5.0 if dedup else None,
                lower_is_better=True,
            )
        )


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 pages, dedup of 10^4 docs, fewer repeats")
    parser.add_argument("--pages", type=int, default=None, help="pages for the filter and minhash rows")
    parser.add_argument("--dedup-docs", type=int, default=None, help="documents for the end-to-end dedup")
    parser.add_argument("--fineweb-mb", type=float, default=None, help="MB of pages for the FineWeb pipeline")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: filters,minhash,dedup,fineweb")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=1234)
    if argv is None and sys.argv[1:2] == ["--datatrove-run"]:
        return _datatrove_side(sys.argv[2:])
    args = parser.parse_args(argv)
    args.fineweb_mb = args.fineweb_mb or (1 if args.quick else 24)
    args.fineweb_repeat = 1
    args.fineweb_cases = [(True, 1), (True, 2)] if args.quick else [(True, 1), (True, 2), (False, 1), (False, 2)]
    args.pages = args.pages or (200 if args.quick else 1000)
    args.dedup_docs = args.dedup_docs or (10**4 if args.quick else 10**6)
    args.repeat = 2 if args.quick else 3
    skip = set(filter(None, args.skip.split(",")))
    rows: list[Row] = []
    with scratch_directory(args.dir, "bench_clean_", args.quick) as directory:
        from importlib.metadata import version

        from loguru import logger

        logger.disable("datatrove")  # its steps log at INFO ("Sorting buckets...")
        print(f"  datatrove {version('datatrove')}, spacy {version('spacy')}, xxhash {version('xxhash')}", flush=True)
        modules = stdlib_modules()
        prose = [module_paragraphs(source) for source in modules]
        pages = web_pages(modules, prose, args.pages, args.seed)
        words = np.array([len(p.split()) for p in pages])
        print(
            f"  {len(pages):,} pages from {len(modules):,} stdlib modules: {sum(map(len, pages)) / 1e6:.2f} M chars, "
            f"words per page mean {words.mean():.0f}, median {np.median(words):.0f}",
            flush=True,
        )
        if "fineweb" not in skip:
            bench_fineweb(rows, modules, prose, directory, args)
        if "dedup" not in skip:
            bench_dedup(rows, prose, directory, args)
        if "filters" not in skip:
            bench_filters(rows, pages, args)
        if "minhash" not in skip:
            bench_minhash(rows, pages, directory, args)
        gc.collect()
    print()
    print_table(rows)
    print()
    print("ratio: tokenport / baseline (docs/s; higher is better). Both sides on one core of this process.")
    print_goals(rows)


if __name__ == "__main__":
    main()
