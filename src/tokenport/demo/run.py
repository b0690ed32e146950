"""`tokenport demo`: the main job end to end on the embedded corpus (the Python stdlib).

Builds two datasets (code and prose), prepares them into token stores with the default
tokenizer, verifies and inspects them, reads them back, and reports what each stage did.
Each capability that lands extends this tour.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from .._jit import announce_compilation
from ..blend import BlendedDataset
from ..builder import IndexCache, build_datasets, build_gpt_dataset, load_blend_spec, split_document_ranges
from ..builder.report import blend_report
from ..builder.specs import Blend
from ..corpus import PrepareConfig, prepare
from ..corpus.run.report import load_report
from ..errors import InputDataError
from ..indexed import IndexedDataset, merge, verify
from ..indexed.inspect import summarize
from ..samples.gpt import GPTDataset, GPTSampleConfig
from ..samples.packed import PackedDataset
from ..samples.sft import SFTDataset
from ..sampling import PretrainingSampler, RandomSampler, StreamSampler, dataset_epochs
from ..sampling.report import batching_report, render_batching_report
from ..tokenizers import load_tokenizer
from .corpus import build_demo_corpus, build_documentation, build_sft_conversations
from .experience import experience_stage
from .next_steps import echo_next_steps
from .progress import Progress
from .takedown import takedown_stage

Echo = Callable[[str], None]
T = TypeVar("T")


def _built(value: object, kind: type[T], what: str) -> T:
    """`value` as the `kind` a stage built; InputDataError when the corpus was too small to build it."""
    if not isinstance(value, kind):
        raise InputDataError(f"demo: the corpus gave no {what}; run the demo with a larger --limit, or none")
    return value


def _fresh(directory: str) -> str:
    """Empty a directory the demo made before (it holds only demo output)."""
    if os.path.isdir(directory):
        shutil.rmtree(directory)
    os.makedirs(directory)
    return directory


DEMO_KERNELS = tuple(
    f"tokenport.{name}"
    for name in (
        "blend.indices",
        "blend.tijdeman",
        "corpus.steps.minhash",
        "corpus.steps.quality",
        "dock.copying",
        "packing.balance",
        "packing.bins",
        "rng.legacy_shuffle",
        "rng.mt19937",
        "rng.torch_randperm",
        "samples.fields",
        "samples.gpt",
        "sampling.length_grouping",
    )
)
"""Modules whose kernels the demo runs (those a cold numba cache holds after a demo)."""


def run_demo(
    workdir: str,
    *,
    workers: int | None = None,
    limit: int | None = None,
    echo: Echo = print,
    heartbeat: float | None = None,
) -> None:
    """Run every stage on the stdlib corpus under `workdir`, echoing a report, and a progress line whenever
    a stage is silent for `heartbeat` seconds (default: HEARTBEAT_SECONDS); end with commands to try next."""
    with Progress(echo, interval=heartbeat) as progress:
        _stages(os.path.abspath(workdir), workers, limit, progress)


def _stages(workdir: str, workers: int | None, limit: int | None, echo: Progress) -> None:
    """The demo's 15 stages in order, then what to try next."""
    started = time.perf_counter()
    echo(f"tokenport demo in {workdir}")
    announce_compilation(DEMO_KERNELS)

    echo("\n== 1. corpus: the Python standard library's source files and docstrings")
    echo.doing("reading the standard library's sources and docstrings")
    corpus = build_demo_corpus(os.path.join(workdir, "corpus"), limit=limit)
    echo(f"code   {corpus.code_documents:>7,} modules     {corpus.code_bytes / 2**20:7.1f} MiB -> {corpus.code_path}")
    echo(
        f"prose  {corpus.prose_documents:>7,} docstrings  {corpus.prose_bytes / 2**20:7.1f} MiB -> {corpus.prose_path}"
    )

    stores = _fresh(os.path.join(workdir, "stores"))
    parts, prepared_tokens = _prepare_stores(corpus.code_path, corpus.prose_path, stores, workers, echo)
    _verify_and_inspect(parts, workdir, echo)

    echo("== 5. merge and read: one store of both datasets, random and batched reads")
    echo.doing("merging the stores")
    merged = merge(os.path.join(stores, "all"), parts["code"] + parts["prose"], overwrite=True)
    ds = IndexedDataset(merged)
    echo(
        f"merged {len(parts['code']) + len(parts['prose'])} stores: {len(ds):,} sequences, {ds.num_tokens:,} tokens"
        f" ({'equal to' if ds.num_tokens == prepared_tokens else 'DIFFERENT FROM'} the parts' sum)"
    )
    _time_reads(ds, echo)
    _gpt_samples(ds, os.path.join(stores, "index-cache"), echo)
    ds.close()
    _blend(parts, workdir, os.path.join(stores, "index-cache"), echo)
    _sampling(merged, echo)
    experience_stage(merged, os.path.join(workdir, "dock-checkpoint"), echo)
    _clean(corpus.prose_path, os.path.join(stores, "prose-clean"), workers, echo)
    _train(os.path.join(stores, "blend.json"), os.path.join(workdir, "train"), echo)
    _sft(workdir, limit, echo)
    _mixing(parts, workdir, os.path.join(stores, "index-cache"), echo)
    _grpo(echo)
    _account(os.path.join(stores, "blend.json"), os.path.join(workdir, "train"), echo)
    echo(f"\ndemo finished in {time.perf_counter() - started:.1f} s")
    echo_next_steps(workdir, echo)


def _workers(workers: int | None) -> dict[str, Any]:
    """The prepare setting for ``--workers``: none given keeps PrepareConfig's default (all cores)."""
    return {"workers": workers} if workers else {}


def _prepare_stores(
    code: str, prose: str, stores: str, workers: int | None, echo: Progress
) -> tuple[dict[str, list[str]], int]:
    """Prepare the code and prose corpora into stores: each one's parts, and the tokens of all."""
    echo("\n== 2. prepare: tokenize with the built-in byte-level tokenizer into .bin/.idx stores")
    parts: dict[str, list[str]] = {}
    prepared_tokens = 0
    for name, path, shard_tokens in (("code", code, 4 << 20), ("prose", prose, 1 << 30)):
        config = PrepareConfig(
            inputs=(path,),
            output=os.path.join(stores, name),
            shard_by="tokens",
            shard_tokens=shard_tokens,
            **_workers(workers),
        )
        echo.doing(f"tokenizing the {name} corpus")
        result = prepare(config)
        parts[name] = list(result.parts)
        prepared_tokens += result.tokens
        echo(f"[{name}] " + result.summary().replace("\n", f"\n[{name}] "))
    return parts, prepared_tokens


def _verify_and_inspect(parts: dict[str, list[str]], workdir: str, echo: Echo) -> None:
    """Verify every store prepared; show what the first of each dataset holds."""
    echo("\n== 3. verify: structure of every .idx, sizes, and the manifests' checksums")
    for prefixes in parts.values():
        for prefix in prefixes:
            report = verify(prefix)
            echo(
                f"ok  {os.path.relpath(prefix, workdir)}: {report.sequences:,} sequences, "
                f"{report.tokens:,} tokens, checksums {report.checksums}"
            )

    echo("\n== 4. inspect: what a store holds")
    for prefixes in parts.values():
        echo(summarize(prefixes[0], documents=2).render())
        echo("")


def _gpt_samples(ds: IndexedDataset, cache_dir: str, echo: Progress) -> None:
    """Cut the merged store into Megatron-exact GPT samples through the index cache; show one sample."""
    echo("\n== 6. samples: documents -> fixed-length GPT samples (Megatron's split and indices, cached)")
    tokenizer = load_tokenizer("byte")
    ranges = split_document_ranges("969,30,1", len(ds))
    train, valid = _built(ranges[0], tuple, "train split"), _built(ranges[1], tuple, "valid split")
    config = GPTSampleConfig(seq_length=1024, eod_id=tokenizer.eod_id, reset_position_ids=True, eod_mask_loss=True)
    cache = IndexCache(cache_dir)
    num_samples = 2 * ds.num_tokens // 1024
    echo.doing("building the GPT sample indices")
    begin = time.perf_counter()
    build_gpt_dataset(ds, num_samples, config, 1234, split="969,30,1", which="train", cache=cache)
    built = time.perf_counter() - begin
    begin = time.perf_counter()
    reopened_samples = build_gpt_dataset(
        IndexedDataset(ds.prefix), num_samples, config, 1234, split="969,30,1", which="train", cache=cache
    )
    samples = _built(reopened_samples, GPTDataset, "GPT samples")
    reopened = time.perf_counter() - begin
    epochs = len(samples.document_index) // (train[1] - train[0])
    echo(f"train split: documents {train[0]:,}..{train[1]:,} of {len(ds):,}; valid {valid[0]:,}..{valid[1]:,}")
    echo(
        f"{len(samples):,} samples of 1024+1 tokens over {epochs} epochs; indices built and cached in "
        f"{built * 1000:.0f} ms, reopened from the cache in {reopened * 1000:.1f} ms"
    )
    ids = np.random.default_rng(1).integers(0, len(samples), 2000).tolist()
    begin = time.perf_counter()
    for i in ids:
        samples[i]
    echo(
        f"random samples[i]:   {len(ids) / (time.perf_counter() - begin):12,.0f} samples/s "
        "(tokens, labels, loss_mask, position_ids, cu_seqlens)"
    )
    batch = samples.get_batch(np.arange(min(256, len(samples))))
    pick = int(np.argmax((batch["cu_seqlens"] < 1024).sum(axis=1)))  # the sample with most documents
    sample = samples[pick]
    boundaries = sample["cu_seqlens"][: int(np.argmax(sample["cu_seqlens"] == 1024)) + 1]
    echo(
        f"sample {pick}: tokens {sample['tokens'].shape}, loss on {int(sample['loss_mask'].sum())} positions "
        f"(EOD masked), documents at cu_seqlens {boundaries.tolist()}, max_seqlen {int(sample['max_seqlen'])}"
    )
    echo(f"sample {pick} position_ids restart at each document: {sample['position_ids'][boundaries[1:-1]].tolist()}")


def _blend(parts: dict[str, list[str]], workdir: str, cache_dir: str, echo: Progress) -> None:
    """Blend the code and prose stores 30/70 from a spec file; report the mixture, build the splits."""
    echo("\n== 7. blend: code and prose by weight, exact at every prefix (Tijdeman's schedule)")
    spec_path = os.path.join(workdir, "stores", "blend.json")
    with open(spec_path, "w", encoding="utf-8") as f:  # each dataset's parts share its weight by tokens
        json.dump(
            {
                "blend": [
                    {"name": "code", "weight": 0.3, "parts": parts["code"]},
                    {"name": "prose", "weight": 0.7, "parts": parts["prose"]},
                ]
            },
            f,
            indent=2,
        )
    spec = load_blend_spec(spec_path)
    blend = _built(spec.blend, Blend, "blend")
    echo(f"spec {os.path.relpath(spec_path, workdir)}: {len(blend.prefixes)} stores in 2 groups")
    for report in blend_report(spec, 20_000, seq_length=1024):
        echo(report.render(root=workdir))
    config = GPTSampleConfig(seq_length=1024, eod_id=load_tokenizer("byte").eod_id)
    echo.doing("building the blend's train/valid/test splits")
    begin = time.perf_counter()
    splits = build_datasets(spec, sizes=(20_000, 200, 20), config=config, seed=1234, split="90,5,5", cache=cache_dir)
    train, valid, test = (_built(split, BlendedDataset, "blended split") for split in splits)
    built = time.perf_counter() - begin
    echo(
        f"train/valid/test: {len(train):,} / {len(valid):,} / {len(test):,} samples, every store's share "
        f"of each split built exactly as large as the blend needs, in {built * 1000:.0f} ms"
    )
    sample = train[0]
    echo(
        f"train[0] comes from {os.path.relpath(train.datasets[sample['dataset_id']].dataset.prefix, workdir)}; "
        f"samples per store: {train.samples_per_dataset().tolist()}"
    )
    sampler = PretrainingSampler(len(train), 0, micro_batch_size=8, data_parallel_rank=0, data_parallel_size=4)
    sampler.advance(16_000)  # as if 500 training steps of 32 samples had run
    echo(
        f"after {sampler.consumed_samples:,} training samples, passes over each store's train split "
        "(and where the first ended):"
    )
    for passes in dataset_epochs(train, sampler.consumed_stream()):
        name = os.path.relpath(train.datasets[passes.dataset].dataset.prefix, workdir)
        first = f", first at sample {passes.boundaries[0]:,}" if passes.boundaries else ""
        echo(f"  {name}: {passes.epochs:.2f} epochs{first}")


def _sampling(prefix: str, echo: Progress) -> None:
    """Batch the merged store's documents: padding by order, packing, rank balance, a resumable sampler."""
    echo("\n== 8. sampling: length grouping, best-fit packing, rank balance, exact and elastic resume")
    ds = IndexedDataset(prefix)
    echo.doing("measuring padding, packing and rank balance of the merged store")
    echo(render_batching_report(batching_report(ds.sequence_lengths, 8, capacity=4096, data_parallel_size=8)))
    echo.doing("packing the merged store into samples of 4096 tokens")
    packed = PackedDataset(ds, 4096, too_long="split", seed=0)
    sample = packed[0]
    echo(
        f"packed: {len(packed):,} samples of 4096 tokens at {packed.efficiency:.3%} efficiency; sample 0 holds "
        f"{int(sample['num_documents'])} documents, labels never cross them"
    )
    sampler = RandomSampler(len(packed), 0, micro_batch_size=2, data_parallel_rank=0, data_parallel_size=2, seed=7)
    batches = iter(sampler)
    first = [next(batches) for _ in range(3)]
    state = sampler.state_dict()
    resumed = RandomSampler(len(packed), 0, micro_batch_size=4, data_parallel_rank=0, data_parallel_size=1, seed=7)
    resumed.load_state_dict(state)
    echo(
        f"rank 0 of 2 micro-batches {first}; state {state['consumed_samples']} samples consumed; "
        f"resumed on 1 rank, the global stream continues with {next(iter(resumed))}"
    )
    _elastic(len(packed), echo)
    ds.close()


def _elastic(total: int, echo: Progress) -> None:
    """A StreamSampler saved at global batch 4 resumes at global batch 6: the same global order, boundaries moved."""
    saved = StreamSampler(total, 0, micro_batch_size=2, data_parallel_rank=0, data_parallel_size=2, seed=7)
    saved.consumed_samples = 8  # two steps of 4 trained
    state = saved.state_dict()
    ranks = [StreamSampler(total, 0, 2, rank, 3, seed=7) for rank in range(3)]  # global batch 6 now
    for sampler in ranks:
        sampler.load_state_dict(state)
    step = [int(i) for sampler in ranks for i in next(iter(sampler))]
    same = step == [int(i) for i in saved.global_stream(8, 14)]  # the stream the README defines
    echo(
        f"saved at global batch 4, resumed on 3 ranks at global batch 6: the next step reads {step}; "
        f"positions 8-13 of the uninterrupted global order: {'the same' if same else 'DIFFERENT'}"
    )


def _clean(prose: str, output: str, workers: int | None, echo: Progress) -> None:
    """Prepare the docstrings again through cleaning steps; report what each removed and why."""
    echo("\n== 10. clean: quality filters, line corrections, PII scrubbing and fuzzy dedup inside prepare")
    steps = [
        {"step": "line_corrections"},
        {"step": "gopher_quality"},
        {"step": "gopher_repetition"},
        {"step": "exact_dedup"},
        {"step": "minhash_dedup"},
        {"step": "pii"},
    ]
    config = PrepareConfig(inputs=(prose,), output=output, steps=steps, keep_rejected=True, **_workers(workers))
    echo.doing(f"preparing the docstrings through {len(steps)} cleaning steps")
    result = prepare(config)
    echo(load_report(output).render())
    rejected = sum(
        1
        for name in os.listdir(os.path.join(output, "rejected"))
        for _ in open(os.path.join(output, "rejected", name), encoding="utf-8")
    )
    echo(
        f"{rejected:,} rejected documents kept for audit under {os.path.basename(output)}/rejected/; "
        f"{result.documents:,} documents remain"
    )


def _skipped_without_torch(missing: ModuleNotFoundError, what: str, echo: Echo) -> None:
    """Say a stage's torch part was skipped when torch is what is missing; re-raise any other missing module."""
    if missing.name != "torch":
        raise missing
    echo(f'{what}: torch is not installed (python3 -m pip install -e ".[torch]" torch==2.13.0 to run it)')


def _train(spec: str, directory: str, echo: Progress) -> None:
    """Train a tiny decoder on the blend (1 rank, in process): once straight, once in two halves with a resume."""
    echo("\n== 11. train: a tiny decoder-only model on the code/prose blend, checkpointed mid-way and resumed")
    try:
        from .train import TrainConfig, launch
    except ModuleNotFoundError as missing:
        _skipped_without_torch(missing, "skipped", echo)
        return

    config = TrainConfig(steps=24, checkpoint_every=12)
    begin = time.perf_counter()

    def steps(what: str) -> Callable[[int, int], None]:
        return lambda done, total: echo.step(done, total, what)

    echo.doing("the straight run")
    straight = launch(spec, _fresh(os.path.join(directory, "straight")), config, ranks=1, on_step=steps("straight run"))
    halves = _fresh(os.path.join(directory, "halves"))
    echo.doing("the first half")
    launch(spec, halves, replace(config, steps=12), ranks=1, on_step=steps("first half"))
    echo.doing("the resumed run")
    resumed = launch(spec, halves, config, ranks=1, resume=True, on_step=steps("resumed from step 12"))
    elapsed = time.perf_counter() - begin
    losses = straight.losses
    echo(
        f"{config.steps} steps of {config.global_batch_size} samples x {config.seq_length} tokens, 3 runs in "
        f"{elapsed:.1f} s; loss {losses[0]:.4f} -> {losses[-1]:.4f} "
        f"({'falls' if losses[-1] < losses[0] else 'DOES NOT FALL'})"
    )
    echo("step  straight run          stopped at 12, resumed")
    for step in (1, 6, 12, 13, 18, 24):
        a, b = straight.steps[step - 1]["loss"], resumed.steps[step - 1]["loss"]
        echo(f"{step:>4}  {a:<22}{b:<22}{'equal' if a == b else 'DIFFERENT'}")
    same = straight.steps == resumed.steps
    echo(
        f"all {config.steps} losses, sample ids and token digests "
        f"{'bitwise equal' if same else 'DIFFER'} (checkpoint {os.path.basename(halves)}/step-000012.pt)"
    )


SFT_SEQ_LENGTH = 384


def _sft(workdir: str, limit: int | None, echo: Progress) -> None:
    """Supervised fine-tuning: stdlib Q&A conversations -> a chat store with loss masks -> packed
    samples (one shown with its trained tokens marked) -> a few steps of the tiny decoder."""
    echo("\n== 12. sft: conversations about stdlib functions -> chat store with loss masks -> packed samples")
    conversations = os.path.join(workdir, "corpus", "conversations.jsonl")
    echo.doing("writing conversations about stdlib functions")
    count = build_sft_conversations(conversations, limit=limit)
    echo(
        f"{count:,} conversations (messages, ShareGPT and prompt-completion records; some with a system prompt, "
        f"some asking for the signature next) -> {os.path.relpath(conversations, workdir)}"
    )
    output = _fresh(os.path.join(workdir, "stores", "chat"))
    echo.doing("preparing the conversations with the ChatML template")
    result = prepare(PrepareConfig(inputs=(conversations,), output=output, format="chat", workers=1))
    coverage = summarize(result.parts[0]).mask_coverage or 0.0
    echo(
        f"prepared with the built-in ChatML template: {result.documents:,} conversations, {result.tokens:,} tokens, "
        f"{coverage:.1%} of tokens trained (assistant turns only)"
    )
    store = IndexedDataset(result.parts[0])
    dataset = SFTDataset(store, SFT_SEQ_LENGTH, packing="bfd")
    counts = dataset.counts
    echo(
        f"packed best-fit into {len(dataset):,} samples of {SFT_SEQ_LENGTH} tokens at "
        f"{counts.tokens / (len(dataset) * SFT_SEQ_LENGTH):.1%} fill; {counts.truncated} too long truncated "
        f"(prompt kept), {counts.dropped} dropped"
    )
    # the sample holding conversation 1, the first with a follow-up turn (samples keep packing's order: no seed)
    pick = int(np.searchsorted(dataset.bin_starts, np.flatnonzero(dataset.piece_document == 1)[0], "right")) - 1
    sample = dataset[pick]
    ends = sample["cu_seqlens"][1 : int(sample["num_documents"]) + 1]
    echo(
        f"sample {pick}: {len(ends)} conversation{'s' * (len(ends) > 1)} ending at {ends.tolist()}, position_ids "
        f"restarting at each; loss on {int(sample['loss_mask'].sum())} of {SFT_SEQ_LENGTH} positions. "
        "Its text, [trained targets] bracketed:"
    )
    lines = render_loss_mask(sample["tokens"][: int(ends[-1])], sample["loss_mask"][: int(ends[-1])])
    for line in lines[:16]:
        echo(f"  | {line if len(line) <= 100 else line[:99] + '…'}")
    if len(lines) > 16:
        echo(f"  | ... {len(lines) - 16} more lines")
    try:
        from .train import TrainConfig, fit
    except ModuleNotFoundError as missing:
        _skipped_without_torch(missing, "skipped training", echo)
        return
    config = TrainConfig(steps=20, global_batch_size=4, seq_length=SFT_SEQ_LENGTH)
    begin = time.perf_counter()
    echo.doing("training")
    losses = fit(dataset, config, on_step=lambda done, total: echo.step(done, total, "training"))
    echo(
        f"{config.steps} steps of {config.global_batch_size} packed samples in {time.perf_counter() - begin:.1f} s, "
        f"loss on assistant tokens {losses[0]:.4f} -> {losses[-1]:.4f} "
        f"({'falls' if losses[-1] < losses[0] else 'DOES NOT FALL'}): "
        + " ".join(f"{loss:.2f}" for loss in losses[:: config.steps // 5])
    )
    store.close()


MIX_STEPS = 40


def _mixing(parts: dict[str, list[str]], workdir: str, cache: str, echo: Progress) -> None:
    """Code, docstrings and documentation prose mixed by ADO as a tiny decoder learns; one step traced."""
    echo("\n== 13. mix: code, docstrings and documentation prose, weighted by what the model is learning (ADO)")
    documentation = os.path.join(workdir, "corpus", "documentation.jsonl")
    sections = build_documentation(documentation)
    output = _fresh(os.path.join(workdir, "stores", "docs"))
    echo.doing("preparing the documentation prose")
    docs = prepare(PrepareConfig(inputs=(documentation,), output=output, workers=1))
    echo(
        f"documentation: {sections} sections of the language reference (pydoc_data.topics) -> "
        f"{docs.tokens:,} tokens in {os.path.relpath(output, workdir)}"
    )
    try:
        from .mixing import train_mixture
        from .train import TrainConfig
    except ModuleNotFoundError as missing:
        _skipped_without_torch(missing, "skipped", echo)
        return
    from ..blend import ADOController

    config = TrainConfig(steps=MIX_STEPS, global_batch_size=8)
    sample_config = GPTSampleConfig(config.seq_length, reset_position_ids=True, eod_mask_loss=True)
    names = ("code", "docstrings", "documentation")
    echo.doing("building the three datasets' samples")
    sources = (parts["code"], parts["prose"], list(docs.parts))
    children = [
        build_datasets(prefixes, sizes=(config.steps * config.global_batch_size, 0, 0), config=sample_config,
                       seed=config.seed, split="1,0,0", cache=cache)[0]
        for prefixes in sources
    ]  # fmt: skip
    begin = time.perf_counter()
    echo.doing("training")
    on_step = lambda done, total: echo.step(done, total, "training")  # noqa: E731
    run = train_mixture(children, config, ADOController(len(children), window=16, min_points=4), on_step=on_step)
    echo(
        f"{config.steps} steps of {config.global_batch_size} samples in {time.perf_counter() - begin:.1f} s; "
        f"{len(run.updates)} weight updates, each applied from the first sample not yet read"
    )
    echo("step  " + "".join(f"{name:>15}" for name in names) + "   (weights in force; mean loss in its batch)")
    weights = np.full(len(names), 1 / len(names))
    starts = {start // config.global_batch_size: np.asarray(w) / sum(w) for start, w in run.updates}
    for step in range(config.steps):
        weights = starts.get(step, weights)
        if step % 8 == 0 or step == config.steps - 1:
            cells = "".join(
                f"{w:>7.1%} {'  -  ' if np.isnan(loss) else f'{loss:5.2f}'} "
                for w, loss in zip(weights, run.losses[step])
            )
            echo(f"{step + 1:>4}  {cells}")
    echo(
        "shares of all samples read, target (integral of the weights) vs realized: "
        + ", ".join(f"{n} {t:.3f}/{r:.3f}" for n, t, r in zip(names, run.target, run.realized))
    )
    _echo_trace(run.state, config.steps - 1, len(run.updates), names, workdir, echo)


def _echo_trace(state: dict[str, Any], step: int, updates: int, names: Sequence[str], workdir: str, echo: Echo) -> None:
    """`tokenport trace` of one step of the mixed run (its loader state saved as mix/state.json): its first
    samples' stores, documents and text."""
    from ..integrations import trace

    path = os.path.join(_fresh(os.path.join(workdir, "mix")), "state.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(state, f)
    traced = trace(state, step)
    echo(
        f"tokenport trace {os.path.relpath(path, workdir)} --step {step}: the batch rebuilt from the loader state "
        f"alone (receipt + {updates} stored updates), first 3 of {len(traced)} samples:"
    )
    for item in traced[:3]:
        child = item.lineage.path[0][0] if item.lineage.path else 0
        pieces = ", ".join(f"doc {d} [{a}, {b})" for d, a, b in item.lineage.pieces[:3])
        text = " ".join("".join(item.texts or ()).split())[:60]
        store = os.path.relpath(item.lineage.store, workdir)
        echo(f"  sample {item.sample} <- {names[child]}: {store} {pieces} {text!r}")


def _account(spec: str, train_dir: str, echo: Progress) -> None:
    """Stage 15 (``demo.takedown``), on stage 11's straight run; skipped without torch, as stage 11 is."""
    try:
        takedown_stage(spec, train_dir, echo)
    except ModuleNotFoundError as missing:
        _skipped_without_torch(missing, "skipped", echo)


def _grpo(echo: Progress) -> None:
    """A toy GRPO run through the dock: synchronous, then asynchronous with rollouts one version behind."""
    echo("\n== 14. grpo: a tiny policy learns small sums from a verifiable reward, its stages meeting in the dock")
    try:
        from .grpo import GRPOConfig, run_grpo
    except ModuleNotFoundError as missing:
        _skipped_without_torch(missing, "skipped", echo)
        return
    config = GRPOConfig()
    for mode, how in (("sync", "stages in turn"), ("async", "stages in threads, rollout one version behind")):
        echo.doing(f"the {mode} run")
        begin = time.perf_counter()
        run = run_grpo(config, mode)
        first, last = np.mean(run.rewards[:5]), np.mean(run.rewards[-5:])
        echo(
            f"{mode:>5} ({how}): {config.steps} steps of {config.prompts} prompts x {config.group} answers in "
            f"{time.perf_counter() - begin:.1f} s; mean reward {first:.2f} -> {last:.2f} "
            f"({'rises' if last > first else 'DOES NOT RISE'}); trained on policy versions "
            f"{', '.join(map(str, run.versions[:4]))}, ..."
        )


def render_loss_mask(tokens: np.ndarray, loss_mask: np.ndarray) -> list[str]:
    """The byte-level text of one sample's tokens, lines split, with trained target tokens in brackets.

    Labels are pre-shifted, so ``loss_mask[i]`` trains the target ``tokens[i + 1]``: token ``j`` is
    marked when ``loss_mask[j - 1]`` is 1 (the first token is never a target).
    """
    tokenizer = load_tokenizer("byte")
    trained = np.concatenate([[False], np.asarray(loss_mask[:-1]) > 0])
    edges = np.flatnonzero(np.diff(trained.astype(np.int8))) + 1
    text = []
    for span in np.split(np.arange(len(tokens)), edges):
        if span.size:
            piece = tokenizer.decode(np.asarray(tokens)[span].tolist())
            text.append(f"[{piece}]" if trained[span[0]] else piece)
    return "".join(text).splitlines()


def _time_reads(ds: IndexedDataset, echo: Echo) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, len(ds), 100_000)
    begin = time.perf_counter()
    for i in ids.tolist():
        ds[i]
    single = time.perf_counter() - begin
    batches = ids.reshape(-1, 1000)
    begin = time.perf_counter()
    tokens_read = 0
    for batch in batches:
        tokens, _ = ds.get_many(batch)
        tokens_read += len(tokens)
    batched = time.perf_counter() - begin
    echo(f"random ds[i]:        {len(ids) / single:12,.0f} documents/s (zero-copy views)")
    echo(
        f"get_many(1000 ids):  {len(ids) / batched:12,.0f} documents/s "
        f"({tokens_read / batched / 1e6:,.0f}M tokens/s copied)"
    )
