"""StatefulLoader: a torch DataLoader whose checkpoint resumes exactly and certifies the data it resumes on.

A DataLoader asks its batch sampler for batches ahead of the training loop (``num_workers ×
prefetch_factor`` of them), so a sampler that counts what it *yields* counts batches that were
never trained on. Here the sampler does not count itself (``auto_advance=False``); the loader
counts one step for each batch it hands to the training loop, so ``state_dict()`` after ``k``
batches resumes with batch ``k + 1``, whatever was prefetched and thrown away.

Each state carries a data receipt (``integrations.receipt``): ``load_state_dict`` refuses to
resume on data that differs from the data the state was taken on, unless the change is accepted
by name. ``StatefulLoader.for_dataset`` builds the sampler for the caller, taking the
data-parallel rank and size from ``torch.distributed`` when it is initialized.

Over tokenport's datasets (GPTDataset, PackedDataset, blends of them) and with torch's default
collate, each micro-batch is fetched with one ``get_batch`` call and handed over as tensors
sharing its arrays (``integrations._fetch``): the same batch as sample by sample, in fewer steps.
Without a ``collate_fn``, a worker process hands each batch over through one reused shared slot (``_handoff``).
``fields=`` keeps only the fields a trainer reads, so fewer tensors cross from worker processes.

Each state also carries the stream's certificate (``integrations.certificate``): a hash chain over the
global batches handed over, hashed when the state is taken (a handover costs one position compare).
``load_state_dict`` checks it: its whole segment (its last step for a /1 state) is recomputed from the
receipt and the sampler.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from time import perf_counter
from typing import Any

from .._checks import NOT_GIVEN, check_int, shuffle_seed
from .._fork import keep_forked_heaps_shared
from .._optional import require
from ..blend import AdaptiveBlend, BlendedDataset
from ..blend.controller import MixtureSignals
from ..errors import ConfigError
from ..metrics import live, record_mixture, record_weight_update
from ..sampling.contract import SAMPLER_MEMBERS, Sampler, missing_members
from ..sampling.pretraining import PretrainingSampler, RandomSampler
from ..sampling.progress import DatasetEpochs, dataset_epochs
from ..sampling.state import STATE_VERSION, Certificate, read_loader_state, read_sampler_state
from ..sampling.stream import StreamSampler
from ._fetch import BatchFetch, check_fields, fetch_plan
from ._handoff import SharedBatch, forget
from ._mixing import ResolvingSampler, global_batch_size, located_plan
from ._readahead import read_ahead
from .certificate import Chain, GlobalBatches, order_digest
from .receipt import (
    DataReceipt,
    check_allow_changes,
    check_receipt,
    check_state_agrees,
    data_receipt,
    sampler_position,
    sampler_seed,
)
from .removal import Masker, adopt, certified_data, layouts, plan, removal_step, requested
from .samplers import replayable

__all__ = ["StatefulLoader", "data_parallel_position"]

logger = logging.getLogger(__name__)

SAMPLER_PROTOCOL = SAMPLER_MEMBERS  # what the loader uses of a batch sampler (the `Sampler` protocol's members)


class StatefulLoader:
    """Batches of ``dataset`` in the order of a tokenport batch sampler, through ``torch.utils.data.DataLoader``.

    ``sampler`` is a batch sampler with state (``tokenport.sampling.Sampler``: PretrainingSampler, RandomSampler,
    StreamSampler or any object with its members; its ``auto_advance`` is switched off: the loader counts). Keyword
    arguments go to the DataLoader (``num_workers``, ``prefetch_factor``, ``pin_memory``,
    ``persistent_workers``...). One ``for`` loop runs to the end of the data (PretrainingSampler)
    or of the current epoch (RandomSampler, StreamSampler: loop again for the next; ``epoch`` says which).
    ``state_dict()``/``load_state_dict()`` checkpoint between steps, with a data receipt;
    ``dataset_epochs()`` reports how far each dataset of a blend has got and where its epochs ended.

    Without ``collate_fn``, a tokenport dataset's micro-batch is one ``get_batch`` call made into a
    dict of tensors (equal to torch's default collate of its samples); ``fields`` (names of the
    samples' fields, default all) keeps only those, in that order; an unknown name is refused.
    """

    def __init__(
        self,
        dataset: Any,
        sampler: Sampler,
        *,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        fields: Sequence[str] | None = None,
        controller: Any = None,
        **loader_options: Any,
    ) -> None:
        missing = missing_members(sampler)
        if missing:
            raise ConfigError(
                f"sampler: a {type(sampler).__name__} is not a tokenport batch sampler (it lacks "
                f"{', '.join(missing)}); pass a PretrainingSampler, a RandomSampler or another sampler with "
                f"{', '.join(SAMPLER_PROTOCOL)}"
            )
        for name in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"):
            if name in loader_options:
                raise ConfigError(f"{name}=: the batch sampler decides the batches; drop this DataLoader option")
        _check_order_kept(dataset, sampler)
        _check_controller(dataset, controller)
        sampler.auto_advance = False
        self.controller = controller
        self.dataset = dataset
        self.sampler: Sampler = sampler
        self.collate_fn = collate_fn
        self.fields = check_fields(fields)
        self.loader_options = loader_options
        self._receipt: tuple[Any, DataReceipt] | None = None  # (dataset, its receipt at position 0)
        self._plan: tuple[Any, Any, Any] | None = None  # (dataset, what the DataLoader reads, its collate)
        position, gbs = int(sampler.consumed_samples), _replayable(sampler.state_dict(), dataset)
        # the certificate (its data digest computed when first hashed); None: a sampler no state replays
        self._chain = None if gbs is None else Chain(b"", gbs, runs=[(0, position)], order=self._order())
        self._handed = 0  # batches handed over since the run began (the chain's handovers)
        self._expected = position  # the sampler's position unless something outside the loader moves it
        self._batches: tuple[Any, GlobalBatches] | None = None  # (dataset, its global batches) for hashing
        self._removals: list[tuple[str, dict[str, Any]]] = []  # (the dataset's prefix, receipt record) per removal
        self._masker: Masker | None = None  # None while nothing is removed: one check per handover
        if self.fields is not None:
            self._fetch()  # refuse unknown field names now, not at the first batch

    @classmethod
    def for_dataset(
        cls,
        dataset: Any,
        *,
        micro_batch_size: int,
        seed: int | None = 0,
        data_parallel_rank: int | None = None,
        data_parallel_size: int | None = None,
        group: Any = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        fields: Sequence[str] | None = None,
        shuffle: Any = NOT_GIVEN,
        **loader_options: Any,
    ) -> StatefulLoader:
        """A loader over ``dataset`` with its sampler built here: with an int ``seed`` a StreamSampler
        (``order="feistel"``: a fresh keyed random order of every sample each epoch, computed per
        batch, so resuming costs the same at any position and dataset size; its state resumes on
        any number of ranks and any global batch), with ``seed=None`` PretrainingSampler (one pass in
        id order). ``shuffle=False``: the older spelling of ``seed=None``, kept for one release. Build a
        RandomSampler yourself for Megatron's cyclic order.

        ``data_parallel_rank``/``data_parallel_size`` default to this process's rank and size in
        ``group`` (the data-parallel process group; None: the default group) when
        ``torch.distributed`` is initialized, else 0 and 1; a value given must agree with the group.
        """
        rank, size = data_parallel_position(data_parallel_rank, data_parallel_size, group)
        mbs = check_int("micro_batch_size", micro_batch_size, 1)
        seed = shuffle_seed("StatefulLoader.for_dataset", seed, shuffle)
        total = len(dataset)
        sampler: PretrainingSampler | StreamSampler
        if seed is not None:
            sampler = StreamSampler(total, 0, mbs, rank, size, seed=seed, order="feistel", auto_advance=False)
        else:
            sampler = PretrainingSampler(total, 0, mbs, rank, size, auto_advance=False)
        return cls(dataset, sampler, collate_fn=collate_fn, fields=fields, **loader_options)

    @property
    def consumed_samples(self) -> int:
        """Samples of the batches handed to the training loop so far (all data-parallel ranks together)."""
        return int(self.sampler.consumed_samples)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to (always 0 for the sequential sampler)."""
        return int(getattr(self.sampler, "epoch", 0))

    def __len__(self) -> int:
        """Batches the next ``for`` loop yields."""
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        """This rank's batches from the current position, each counted as consumed when handed over."""
        require("torch", extra="torch", feature="iterating a StatefulLoader")
        from torch.utils.data import DataLoader

        options = dict(self.loader_options)
        source, collate = self._fetch()
        if self.collate_fn is not None or collate is not None:
            options["collate_fn"] = self.collate_fn or collate
        resolving = ResolvingSampler(self.sampler, self.dataset) if isinstance(self.dataset, AdaptiveBlend) else None
        if isinstance(source, BatchFetch):  # remote stores fetch each worker's coming reads ahead
            source.read_ahead = read_ahead(self.sampler, self.dataset)
        loader = DataLoader(source, batch_sampler=resolving or self.sampler, **options)
        if loader.num_workers:
            keep_forked_heaps_shared()
        batches = iter(loader)
        if loader.num_workers:  # torch joins the workers when their iterator goes; then their batch slots are unmapped
            weakref.finalize(batches, forget, {worker.pid for worker in getattr(batches, "_workers", ())})
        yield from self._counted(batches, 0 if loader.num_workers == 0 else None)

    def _counted(self, batches: Iterator[Any], unknown: int | None) -> Iterator[Any]:
        """The DataLoader's batches, each counted consumed when handed over (``unknown``: torch's count of
        batches in flight when it has none)."""
        while True:
            recorder = live.recorder  # None while metrics are off: one check per batch
            began = perf_counter() if recorder is not None else 0.0
            try:
                batch = next(batches)
            except StopIteration:
                return
            if isinstance(batch, SharedBatch):
                batch = batch.unpack()
            if recorder is not None:
                wait = perf_counter() - began
                recorder.loader_batch(batch, wait, getattr(batches, "_tasks_outstanding", unknown))
            if self._masker is not None:  # documents removed: their tokens hidden in this rank's micro-batch
                batch = self._masked(batch)
            self._hand_over()
            yield batch

    def _masked(self, batch: Any) -> Any:
        """``batch``, about to be handed over, with the removed documents' tokens hidden (itself when none is)."""
        return batch if self._masker is None else self._masker.apply(batch, int(self.sampler.consumed_samples))

    def _hand_over(self) -> None:
        """Count one batch handed to the trainer: the sampler advances a step; a position moved from outside
        the loader since the last handover is a jump the certificate records."""
        sampler = self.sampler
        if sampler.consumed_samples != self._expected and self._chain is not None:
            self._chain.jump(self._handed, int(sampler.consumed_samples))
        sampler.advance()
        self._handed += 1
        self._expected = sampler.consumed_samples

    def _fetch(self) -> tuple[Any, Any]:
        """(what the DataLoader reads, its collate or None) for the current dataset, decided once per dataset."""
        if self._plan is None or self._plan[0] is not self.dataset:
            plan = located_plan if isinstance(self.dataset, AdaptiveBlend) else fetch_plan
            source, collate = plan(self.dataset, self.fields, self.collate_fn is None)
            self._plan = (self.dataset, source, collate)
        return self._plan[1], self._plan[2]

    def dataset_epochs(self) -> tuple[DatasetEpochs, ...]:
        """Per dataset (each child of a blend, else the one dataset): samples consumed by all ranks,
        epochs so far and the consumed-sample count where each epoch ended. Recomputed from the
        consumed samples (cost linear in them): call it when logging, not every step."""
        return dataset_epochs(self.dataset, self.sampler.consumed_stream())

    def receipt(self) -> DataReceipt:
        """The data receipt at the current position (the dataset part is computed once per dataset)."""
        if self._receipt is None or self._receipt[0] is not self.dataset:
            self._receipt = (self.dataset, data_receipt(self.dataset))
        base = self._receipt[1]
        removed = tuple(record for _, record in self._removals)
        position = sampler_position(self.sampler)
        seed = sampler_seed(self.sampler)
        return DataReceipt(base.dataset, base.length, seed, position, base.uncertified, removed=removed)

    def update_mixture(self, signals: MixtureSignals) -> int | None:
        """Ask the controller for weights at the current step; apply them (``set_mixture``) when it gives some.
        Returns the first sample they apply to, or None when the controller keeps the weights. A controller
        with ``update_at(sample, signals)`` (``ScheduleController``) is asked at the consumed sample itself,
        so its weights do not depend on the global batch (a resume may change it)."""
        if self.controller is None:
            raise ConfigError("update_mixture: this loader has no controller; pass controller= or call set_mixture")
        at_sample = getattr(self.controller, "update_at", None)
        if callable(at_sample):
            weights = at_sample(self.consumed_samples, signals)
        else:
            weights = self.controller.update(self.consumed_samples // global_batch_size(self.sampler), signals)
        return None if weights is None else self.set_mixture(weights)

    def set_mixture(self, weights: Sequence[float] | Any, from_sample: int | None = None) -> int:
        """Blend by ``weights`` from ``from_sample`` (ConfigError, changing nothing, for a sample already
        handed over or resolved), by default from the first sample the loader has not yet handed over,
        resolved nor given weights: the frontier (deterministic given ``num_workers`` and
        ``prefetch_factor``), the position (a resumed blend has resolved nothing yet) or a later pending
        update's sample, whose weights these replace (a resume on fewer workers restores updates past its
        frontier); returns that sample. Needs an AdaptiveBlend."""
        if not isinstance(self.dataset, AdaptiveBlend):
            raise ConfigError(
                f"set_mixture: the dataset is a {type(self.dataset).__name__}; weights change while training "
                "over an AdaptiveBlend only"
            )
        blend = self.dataset
        handed = min(self.consumed_samples, len(blend))  # the blend's samples handed over (read in order)
        if from_sample is None:
            start = max(blend.frontier, blend.last_update_sample, handed)
        else:
            start = check_int("from_sample", from_sample, 0)
            if start < handed:  # a resumed blend has realized nothing: set_weights alone would take it
                raise ConfigError(
                    f"from_sample={start}: the loader has handed samples up to {handed} over already; "
                    f"apply the weights from sample {handed} or later"
                )
        blend.set_weights(weights, start)
        if live.recorder is not None:  # metrics on: the shares of what the trainer has been handed so far
            shown = min(handed, blend.frontier)
            if shown:
                record_mixture(blend.target_shares(shown), blend.realized_shares(shown))
            record_weight_update()
        return start

    def remove_documents(self, documents: Any) -> int:
        """Remove ``documents`` from the run from the next batch handed over (``integrations.removal``): their
        tokens become padding with no loss in every batch from then on; every other token, sample and position
        stays. ``documents``: ``(store, document)`` pairs (the store's prefix as ``lineage`` names it), a
        ``WhereReport`` or the dict ``tokenport where --json`` printed; one removed already is left as it is.
        Returns the step the removal applies from. ConfigError (changing nothing) for a store the dataset does
        not read, an id outside it, an id that is not an int, or batches whose layout the loader does not know."""
        pairs = requested(documents)
        tree = self.receipt().dataset
        consumed = int(self.sampler.consumed_samples)
        step = removal_step(consumed, global_batch_size(self.sampler))
        records = [record for _, record in self._removals]
        new = plan(pairs, self.dataset, tree, records, consumed, step)
        if not new:
            return step
        removals = [*self._removals, *new]
        masker = self._masker_for(removals, self.sampler.state_dict())
        if self._chain is not None:
            self.certificate()  # the steps so far hashed on the data before the removal
        chain = self._chain
        if chain is not None:  # a new segment: its data digest covers the removals
            data = certified_data(tree, [record for _, record in removals])
            handed = self._handed
            runs = [(handed, consumed)]
            self._chain = Chain(
                data, chain.global_batch, since=handed, base=chain.digest, runs=runs, steps=handed, order=chain.order
            )
        self._removals, self._masker = removals, masker
        return step

    def _masker_for(self, removals: list[tuple[str, dict[str, Any]]], sampler_state: Any) -> Masker:
        """The masker of ``removals`` over this loader's dataset; ConfigError when its batches cannot be masked."""
        if self.collate_fn is not None and getattr(self.collate_fn, "removal_layout", None) != "causal_lm":
            raise ConfigError(
                "remove_documents: the loader has a collate_fn, so where a sample's tokens lie in a batch is unknown; "
                "drop collate_fn (the default collate keeps each sample's fields as rows) or use "
                "tokenport.integrations.hf.TokenportCollator to remove documents"
            )
        needed = layouts(self.dataset, {prefix for prefix, _ in removals})
        for prefix, layout in needed.items():
            missing = [name for name in layout.fields if self.fields is not None and name not in self.fields]
            if missing:
                raise ConfigError(
                    f"remove_documents: fields= leaves out {', '.join(missing)}, which hiding store {prefix!r}'s "
                    "removed tokens writes; keep them in fields"
                )
        rank = getattr(self.sampler, "data_parallel_rank", None)
        if not isinstance(rank, int) or _replayable(sampler_state, self.dataset) is None:
            raise ConfigError(
                f"remove_documents: a {type(self.sampler).__name__}'s batches cannot be recomputed from its state, so "
                "which samples a batch holds is unknown; use a tokenport sampler or one given to register_sampler"
            )
        collated = self.collate_fn is not None  # a TokenportCollator (remove_documents refuses any other)
        ignore = int(getattr(self.collate_fn, "ignore_index", -100)) if collated else None
        return Masker(self.dataset, sampler_state, rank, removals, ignore)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state at the last batch handed over, and the data receipt (plain JSON types); over an
        AdaptiveBlend also ``mixture``: ``{"updates": [[from_sample, [weights...]], ...]}``."""
        receipt = self.receipt()
        state = {"version": STATE_VERSION, "sampler": self.sampler.state_dict(), "receipt": receipt.to_dict()}
        if isinstance(self.dataset, AdaptiveBlend):
            state["mixture"] = {"updates": self.dataset.describe()["updates"]}
        certificate = self.certificate(receipt)
        if certificate is not None:
            state["certificate"] = certificate
        return state

    def certificate(self, receipt: DataReceipt | None = None) -> dict[str, Any] | None:
        """The stream's certificate up to the last batch handed over (``integrations.certificate``): the batches
        handed since the last call are hashed now, their global sample ids recomputed from the sampler.
        None for a sampler whose state cannot be replayed (one of the protocol's, neither tokenport's nor
        registered with ``register_sampler``)."""
        chain = self._chain
        if chain is None:
            return None
        if not chain.data:
            receipt = receipt or self.receipt()
            chain.data = certified_data(receipt.dataset, receipt.removed)
        if self._batches is None or self._batches[0] is not self.dataset:  # once per dataset: replayable?
            try:
                self._batches = (self.dataset, GlobalBatches(self.sampler.state_dict(), self.dataset))
            except ConfigError as exc:  # e.g. a length-grouped order over lengths the dataset does not hold
                logger.warning("the loader's states carry no certificate: its stream cannot be replayed (%s)", exc)
                self._chain = None
                return None
        batches = self._batches[1]
        chain.catch_up(self._handed, lambda: batches)
        return chain.document()

    def _order(self) -> bytes:
        """The digest of the sampler's global order (b"" for a registered sampler: its chain hashes ids)."""
        return order_digest(self.sampler.state_dict())

    def load_state_dict(self, state: Mapping[str, Any], *, allow_changes: Iterable[str] = ()) -> None:
        """Resume where ``state_dict()`` was taken, refusing (ConfigError naming every change) to resume
        on data other than the state's receipt records, except changes of the kinds in
        ``allow_changes`` (``tokenport.integrations.ALLOWED_CHANGES``), each logged:

        - ``"no_receipt"``: a state without a receipt (an old one); nothing is certified.
        - ``"provenance"``: a store's manifest names another tokenizer or preparation fingerprint
          for the same tokens.
        - ``"sample_config"``: sample fields changed (GPTSampleConfig, PackedDataset pad_id,
          label_pad, cu_seqlens_length) with every order unchanged.
        - ``"seed"``: a dataset's own shuffle changed; the run goes on at the same position of the
          new order (within this pass some samples repeat, others are skipped).
        - ``"stores_appended"``: a blend gained datasets after its unchanged ones; the run goes on
          at the same position of the new blend, whose earlier part is not read.
        """
        allowed = check_allow_changes(allow_changes)
        if not isinstance(state, Mapping):
            raise ConfigError(
                f"state: expected the dict StatefulLoader.state_dict() returned, got a {type(state).__name__}"
            )
        typed = read_loader_state(state)  # every field typed before anything is compared or changed
        saved = DataReceipt.from_dict(state["receipt"]) if "receipt" in state else None
        if saved is not None:
            check_state_agrees(saved, state["sampler"], type(self.sampler).__name__)
        current = self.receipt()
        check_receipt(saved, current, allowed)
        _check_mixture(self.dataset, state)
        records = [] if saved is None else [dict(record) for record in saved.removed]
        removals = list(zip(adopt(records, self.dataset, current.dataset, "state['receipt']"), records))
        certified, chain = self._resumed_chain(typed, state, saved, current)
        before = self.sampler.state_dict()
        self.sampler.load_state_dict(state["sampler"])  # refuses, changing nothing, or loads
        try:  # the sampler accepted its state: the certificate's last batch can be replayed from it
            if certified is not None:
                certified.check(lambda: GlobalBatches(state["sampler"], self.dataset), "state['certificate']")
            # the removals' masks over this loader's own layout (an elastic resume reads other micro-batches)
            masker = self._masker_for(removals, self.sampler.state_dict()) if removals else None
            if isinstance(self.dataset, AdaptiveBlend):
                self.dataset.restore_updates(state["mixture"]["updates"])  # refuses, changing nothing, or loads
        except BaseException:
            self.sampler.load_state_dict(before)  # validate, then commit: the refused state changed nothing
            raise
        self._chain, self._expected, self._batches = chain, int(self.sampler.consumed_samples), None
        self._handed = 0 if chain is None else chain.steps
        self._removals, self._masker = removals, masker

    def _resumed_chain(
        self, typed: Any, state: Mapping[str, Any], saved: DataReceipt | None, current: DataReceipt
    ) -> tuple[Chain | None, Chain | None]:
        """(the state's certificate, whose last batch is to be checked; the chain the resume continues): the
        certificate checked against the state's receipt and position (ConfigError), continued in a new
        segment when the data or the global batch changed. Nones when the sampler cannot be replayed."""
        if self._chain is None:
            return None, None
        sampler = read_sampler_state(state["sampler"], "state['sampler']")  # typed before any field is read
        consumed, saved_gbs = sampler.consumed_samples, sampler.micro_batch_size * sampler.data_parallel_size
        gbs, order = self._chain.global_batch, self._order()
        removed = () if saved is None else saved.removed  # the removals the resume adopts
        data = certified_data(current.dataset, removed)
        cert = typed.certificate
        if saved is None or not isinstance(cert, Certificate):
            since = -(-consumed // saved_gbs)
            logger.warning(
                "the state has no certificate (saved before certificates, or without a receipt): a chain starts at "
                "step %d; the steps before it are not certified",
                since,
            )
            return None, Chain(data, gbs, since=since, runs=[(since, consumed)], steps=since, order=order)
        chain = Chain.from_document(cert, saved_gbs)
        for name, part, digest in (
            ("data", "receipt", certified_data(saved.dataset, saved.removed)),
            ("order", "sampler", order_digest(state["sampler"])),
        ):
            if getattr(chain, name) not in (digest, b""):  # no order: a /1 certificate
                raise ConfigError(
                    f"state['certificate']['{name}'] is not the digest of state['{part}']: the state was edited or "
                    "assembled from two saves; resume from a state saved whole by StatefulLoader.state_dict()"
                )
        if chain.end() != consumed:
            raise ConfigError(
                f"state['certificate']: its {chain.steps} step(s) end at consumed_samples={chain.end()} but "
                f"state['sampler']['consumed_samples']={consumed}: the position was edited (steps would be "
                "skipped or repeated); resume from a state saved whole by StatefulLoader.state_dict()"
            )
        if (data, gbs, order) != (chain.data, saved_gbs, chain.order):  # an accepted data change, another global
            steps = chain.steps  # batch or order, or a /1 state: a new segment
            return chain, Chain(
                data, gbs, since=steps, base=chain.digest, runs=[(steps, consumed)], steps=steps, order=order
            )
        return chain, Chain.from_document(cert, gbs)


def _replayable(sampler_state: Any, dataset: Any) -> int | None:
    """The global batch of a sampler whose state names a kind ``sampler_from_state`` rebuilds over ``dataset``
    (its whole length), else None: such a sampler's stream cannot be recomputed, so it gets no certificate."""
    try:
        typed = read_sampler_state(sampler_state)
    except ConfigError:
        return None
    if not replayable(sampler_state) or typed.total_samples != len(dataset):
        return None
    return typed.micro_batch_size * typed.data_parallel_size


def data_parallel_position(
    data_parallel_rank: int | None = None, data_parallel_size: int | None = None, group: Any = None
) -> tuple[int, int]:
    """(rank, size) of this process in data parallelism: each given value, else the process group's
    (``group``, or torch.distributed's default group, when initialized), else 0 and 1.
    ConfigError when a given value disagrees with an initialized group."""
    dist = _initialized_distributed()
    if dist is None:
        if group is not None:
            raise ConfigError(
                "group=: torch.distributed is not initialized; call init_process_group first, or drop group"
            )
        rank = 0 if data_parallel_rank is None else check_int("data_parallel_rank", data_parallel_rank, 0)
        size = 1 if data_parallel_size is None else check_int("data_parallel_size", data_parallel_size, 1)
        return rank, size
    group_rank, group_size = int(dist.get_rank(group)), int(dist.get_world_size(group))
    for name, given, actual in (
        ("data_parallel_rank", data_parallel_rank, group_rank),
        ("data_parallel_size", data_parallel_size, group_size),
    ):
        if given is not None and check_int(name, given, 0) != actual:
            raise ConfigError(
                f"{name}={given} but the torch.distributed process group says {actual}: drop {name} to take "
                "it from the group, or pass group= the data-parallel group it refers to"
            )
    return group_rank, group_size


def _initialized_distributed() -> Any:
    """torch.distributed when its default group is initialized, else None; never imports torch itself."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _check_order_kept(dataset: Any, sampler: Any) -> None:
    """ConfigError when ``sampler`` shuffles a blend whose mixture schedule follows the sample position."""
    shuffles = isinstance(sampler, RandomSampler) or (
        isinstance(sampler, StreamSampler) and sampler.order != "sequential"
    )
    if shuffles and _has_schedule(dataset):
        raise ConfigError(
            f"sampler: a {type(sampler).__name__} shuffles the sample ids, but the dataset is a blend with a mixture "
            "schedule whose weights change with the sample position (or an AdaptiveBlend) (its children are "
            "shuffled already): "
            "read it in order with a PretrainingSampler, StreamSampler(order='sequential') or "
            "for_dataset(..., seed=None)"
        )


def _check_controller(dataset: Any, controller: Any) -> None:
    """ConfigError unless ``controller`` is None, or an object with ``update`` over an AdaptiveBlend."""
    if controller is None:
        return
    if not callable(getattr(controller, "update", None)):
        raise ConfigError(
            f"controller: a {type(controller).__name__} has no update(step, signals) method; pass a MixtureController"
        )
    if not isinstance(dataset, AdaptiveBlend):
        raise ConfigError(
            f"controller: the dataset is a {type(dataset).__name__}, whose weights are fixed; "
            "blend with an AdaptiveBlend to change them while training"
        )


def _check_mixture(dataset: Any, state: Mapping[str, Any]) -> None:
    """ConfigError when ``state`` holds mixture updates and ``dataset`` is no AdaptiveBlend, or the reverse."""
    mixture = state.get("mixture")
    if isinstance(dataset, AdaptiveBlend):
        if mixture is None:
            raise ConfigError(
                "state has no 'mixture' updates but the dataset is an AdaptiveBlend: pass the state_dict() "
                "of a loader over the same adaptive blend"
            )
    elif mixture is not None:
        raise ConfigError(
            f"state holds mixture updates but the dataset is a {type(dataset).__name__}: resume over the AdaptiveBlend"
        )


def _has_schedule(dataset: Any) -> bool:
    """True when ``dataset`` is, or blends, a blend whose weights follow the sample position (a mixture
    schedule, or an AdaptiveBlend)."""
    if isinstance(dataset, AdaptiveBlend):
        return True
    if not isinstance(dataset, BlendedDataset):
        return False
    return dataset.schedule is not None or any(_has_schedule(child) for child in dataset.datasets)
