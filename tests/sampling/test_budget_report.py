"""sampling.budget (token-budget micro-batches, balanced ranks) and sampling.report (pack-report)."""

from __future__ import annotations

import numpy as np
import pytest

from tests._support.stores import build_store, random_documents
from tokenport.errors import ConfigError
from tokenport.indexed.inspect import lengths_of
from tokenport.packing import balance_metrics
from tokenport.sampling import get_length_grouped_indices, length_grouped_order
from tokenport.sampling.budget import balanced_micro_batches, token_budget_batches
from tokenport.sampling.report import batching_report, padding_ratio, render_batching_report


def cost(lengths: np.ndarray, batch: np.ndarray, pad_to_longest: bool) -> int:
    """What a micro-batch costs: longest x count when padded, else the sum of lengths."""
    values = lengths[batch]
    return int(values.max()) * len(values) if pad_to_longest else int(values.sum())


# -- token_budget_batches ---------------------------------------------------------------------------


@pytest.mark.parametrize("pad_to_longest", [True, False])
@pytest.mark.parametrize("grouped", [False, True])
def test_budget_batches_cover_order_and_respect_budget(pad_to_longest, grouped):
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 900, 3000)
    order = length_grouped_order(lengths, 16, seed=3) if grouped else None
    walk = order if grouped else np.arange(lengths.size)
    batches = token_budget_batches(lengths, 2048, order=order, pad_to_longest=pad_to_longest)
    assert np.array_equal(np.concatenate(batches), walk)  # every item once, order kept
    assert all(b.dtype == np.int64 and b.size for b in batches)
    assert all(cost(lengths, b, pad_to_longest) <= 2048 for b in batches)
    for batch, following in zip(batches, batches[1:]):  # greedy: the next item would not have fit
        assert cost(lengths, np.append(batch, following[0]), pad_to_longest) > 2048


def test_budget_batches_small_case_by_hand():
    lengths = [3, 5, 2, 9, 1, 1]
    padded = token_budget_batches(lengths, 10)
    assert [b.tolist() for b in padded] == [[0, 1], [2], [3], [4, 5]]
    summed = token_budget_batches(lengths, 10, pad_to_longest=False)
    assert [b.tolist() for b in summed] == [[0, 1, 2], [3, 4], [5]]
    reordered = token_budget_batches(lengths, 10, order=[3, 1, 0, 2, 4, 5])
    assert [b.tolist() for b in reordered] == [[3], [1, 0], [2, 4, 5]]  # 9 | 5 3 | 2 1 1
    assert token_budget_batches([], 10) == []


@pytest.mark.parametrize("position", [0, 2, 5])
def test_oversize_item_is_an_error_naming_it(position):
    lengths = [2, 2, 2, 2, 2, 2]
    lengths[position] = 11
    with pytest.raises(ConfigError, match=rf"lengths\[{position}\] = 11 is over max_tokens=10"):
        token_budget_batches(lengths, 10)
    with pytest.raises(ConfigError, match=r"lengths\[4\] = 11"):  # named by item id, not by position in order
        token_budget_batches([2, 2, 2, 2, 11], 10, order=[4, 3, 2, 1, 0])


def test_allow_oversize_puts_the_item_alone():
    lengths = np.array([11, 2, 2, 30, 2, 2, 2, 12])
    for pad in (True, False):
        batches = token_budget_batches(lengths, 10, pad_to_longest=pad, allow_oversize=True)
        assert np.array_equal(np.concatenate(batches), np.arange(lengths.size))
        for b in batches:
            assert cost(lengths, b, pad) <= 10 or b.tolist() in ([0], [3], [7])
        assert [0] in [b.tolist() for b in batches] and [3] in [b.tolist() for b in batches]
        assert batches[-1].tolist() == [7]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(max_tokens=0), "max_tokens=0"),
        (dict(max_tokens=True), "max_tokens=True"),
        (dict(max_tokens=8, order=[0, 3]), r"order\[1\] = 3"),
        (dict(max_tokens=8, order=[[0, 1]]), "order: expected a 1-D"),
    ],
)
def test_budget_bad_arguments(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        token_budget_batches([1, 2, 3], **kwargs)
    with pytest.raises(ConfigError, match=r"lengths\[1\] = -2"):
        token_budget_batches([1, -2], 8)


# -- balanced_micro_batches -------------------------------------------------------------------------


def round_robin(n: int, k: int) -> list[np.ndarray]:
    """Rank r takes items r, r + k, ... of the global batch."""
    return [np.arange(r, n, k) for r in range(k)]


def test_balanced_micro_batches_partition_and_beat_round_robin():
    lengths = np.array([4000, 10, 12, 9, 3500, 8, 11, 10, 3000, 7, 9, 12, 2500, 10, 8, 11] * 2)
    groups = balanced_micro_batches(lengths, 4)
    assert len(groups) == 4
    assert np.array_equal(np.sort(np.concatenate(groups)), np.arange(lengths.size))
    ours = balance_metrics(groups, lengths)["max_relative_deviation"]
    theirs = balance_metrics(round_robin(lengths.size, 4), lengths)["max_relative_deviation"]
    assert ours < 0.05 < theirs
    equal = balanced_micro_batches(lengths, 4, equal_size=True)
    assert [g.size for g in equal] == [8, 8, 8, 8]
    assert np.array_equal(np.sort(np.concatenate(equal)), np.arange(lengths.size))


def test_balanced_micro_batches_quadratic_workload():
    lengths = np.random.default_rng(3).integers(1, 2000, 40)
    squares = lengths.astype(np.float64) ** 2
    linear = balanced_micro_batches(lengths, 4)
    quadratic = balanced_micro_batches(lengths, 4, workload=(0.0, 1.0))
    assert balance_metrics(quadratic, squares)["max_relative_deviation"] < 0.005
    assert balance_metrics(linear, squares)["max_relative_deviation"] > 0.01
    assert balance_metrics(linear, lengths)["max_relative_deviation"] < 0.005
    with pytest.raises(ConfigError, match="workload"):
        balanced_micro_batches(lengths, 2, workload=(1.0,))
    with pytest.raises(ConfigError, match="data_parallel_size=0"):
        balanced_micro_batches(lengths, 0)
    with pytest.raises(TypeError, match="num_ranks"):
        balanced_micro_batches(lengths, num_ranks=2)  # the old name of data_parallel_size


# -- report -----------------------------------------------------------------------------------------


def test_padding_ratio_by_hand():
    # batches [1, 2] and [3, 4]: slots 2*2 + 4*2 = 12, tokens 10
    assert padding_ratio([1, 2, 3, 4], np.arange(4), 2) == pytest.approx(1 - 10 / 12)
    # batches [4, 1, 3] and [2] (short last batch): slots 4*3 + 2 = 14
    assert padding_ratio([1, 2, 3, 4], np.array([3, 0, 2, 1]), 3) == pytest.approx(1 - 10 / 14)
    assert padding_ratio([5, 5, 5], np.arange(3), 2) == 0.0


def test_report_on_a_known_small_input():
    # one batch of all four: 1 - 10 / (4 * 4) whatever the order; BFD at 5: {4, 1}, {3, 2}
    report = batching_report([1, 2, 3, 4], 4, capacity=5, data_parallel_size=2, seed=1)
    for key in ("random_padding_ratio", "hf_grouped_padding_ratio", "grouped_padding_ratio"):
        assert report[key] == pytest.approx(0.375)
    assert report["packing_num_bins"] == 2
    assert report["packing_efficiency"] == pytest.approx(1.0)
    assert report["packing_padding_tokens"] == 0
    assert report["balance_global_batches"] == 1 and report["balance_global_batch_size"] == 4
    assert report["balance_first"] == pytest.approx(0.0)  # {1, 4} and {2, 3}
    # four ranks of one item each: totals 1..4 around 2.5, deviation 1.5 / 2.5 for KK and round robin
    spread = batching_report([1, 2, 3, 4], 1, capacity=5, data_parallel_size=4)
    assert spread["balance_mean"] == pytest.approx(0.6) and spread["round_robin_mean"] == pytest.approx(0.6)
    assert spread["balance_bound_mean"] == pytest.approx(0.6)  # 4 / 2.5 - 1
    assert report["balance_bound_mean"] == 0.0  # longest 4 <= mean rank load 5


def test_report_on_skewed_lengths():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, rng.lognormal(6, 1, 20_000)).astype(np.int64)
    report = batching_report(lengths, 8, capacity=4096, data_parallel_size=8, seed=5)
    generator = torch.Generator()
    generator.manual_seed(5)
    hf_order = np.array(get_length_grouped_indices(lengths, 8, generator=generator))
    assert report["hf_grouped_padding_ratio"] == pytest.approx(padding_ratio(lengths, hf_order, 8))
    random_order = np.random.default_rng(5).permutation(lengths.size)
    assert report["random_padding_ratio"] == pytest.approx(padding_ratio(lengths, random_order, 8))
    assert report["grouped_padding_ratio"] < report["random_padding_ratio"] / 3
    assert report["packing_efficiency"] > 0.99
    assert report["balance_global_batches"] == 20_000 // 64
    first = balanced_micro_batches(lengths[random_order[:64]], 8)
    expected = balance_metrics(first, lengths[random_order[:64]])["max_relative_deviation"]
    assert report["balance_first"] == pytest.approx(expected)
    assert report["balance_mean"] < report["round_robin_mean"] / 3
    assert report["balance_worst"] >= report["balance_mean"]
    assert 0 < report["balance_bound_mean"] <= report["balance_mean"]


def test_render_holds_the_numbers():
    report = batching_report([1, 2, 3, 4, 9, 9, 2, 1], 2, capacity=9, data_parallel_size=2, seed=0)
    text = render_batching_report(report)
    for key in ("random_padding_ratio", "grouped_padding_ratio", "balance_mean", "balance_bound_mean"):
        assert f"{100 * report[key]:.2f}%" in text
    assert f"{100 * report['packing_efficiency']:.3f}%" in text
    assert f"{report['packing_num_bins']:,}" in text and "31" in text  # bins, tokens
    widths = {len(line) for line in text.splitlines()}
    assert len(widths) == 1  # aligned: every line as wide


def test_report_bad_arguments():
    with pytest.raises(ConfigError, match="empty"):
        batching_report([], 8)
    with pytest.raises(ConfigError, match="batch_size=0"):
        batching_report([1, 2], 0)
    with pytest.raises(ConfigError, match="seed=-1"):
        batching_report([1, 2], 1, seed=-1)
    with pytest.raises(ConfigError, match="data_parallel_size=0"):
        batching_report([1, 2], 1, data_parallel_size=0)
    with pytest.raises(TypeError, match="num_ranks"):
        batching_report([1, 2], 1, num_ranks=2)  # the old name of data_parallel_size


def test_lengths_of_concatenates_stores(tmp_path):
    rng = np.random.default_rng(1)
    expected = []
    prefixes = []
    for name, count in (("a", 5), ("b", 3)):
        documents = list(random_documents(rng, count, tokens=(3, 1000), length=(1, 50)))
        expected += [len(document) for document in documents]
        prefixes.append(build_store(tmp_path / name, documents, dtype=np.uint16))
    lengths = lengths_of(prefixes)
    assert lengths.dtype == np.int64 and lengths.tolist() == expected
    with pytest.raises(ConfigError, match="prefixes"):
        lengths_of(prefixes[0])


def test_pack_report_verb(tmp_path, capsys):
    from tokenport.cli import main

    documents = random_documents(np.random.default_rng(3), 200, tokens=(3, 1000), length=(1, 300))
    prefix = build_store(tmp_path / "store", documents, dtype=np.uint16)
    assert main(["pack-report", prefix, "--batch-size", "4", "--capacity", "512", "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    report = batching_report(lengths_of([prefix]), 4, capacity=512, data_parallel_size=2, seed=0)
    assert f"{report['packing_num_bins']:,}" in out and f"{report['random_padding_ratio']:.2%}" in out
    assert main(["pack-report", prefix, "--batch-size", "0"]) == 2
    assert "batch_size" in capsys.readouterr().err


def test_pack_report_loads_neither_torch_nor_transformers_and_prints_the_same(tmp_path):
    from tests.test_public_api import fresh

    documents = random_documents(np.random.default_rng(4), 300, tokens=(3, 1000), length=(1, 700))
    prefix = build_store(tmp_path / "store", documents, dtype=np.uint16)
    run = (
        "import contextlib, io, json, sys\nfrom tokenport.cli import main\nout = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out):\n    main(['pack-report', {prefix!r}, '--seed', '9', '--json'])\n"
        "print(json.dumps([json.loads(out.getvalue()), sorted(sys.modules)]))"
    )
    report, modules = fresh(run)
    assert "torch" not in modules and "transformers" not in modules
    torch = pytest.importorskip("torch")
    generator = torch.Generator()
    generator.manual_seed(9)
    lengths = lengths_of([prefix])
    hf_order = np.array(get_length_grouped_indices(lengths, 8, generator=generator))
    assert report["hf_grouped_padding_ratio"] == padding_ratio(lengths, hf_order, 8)  # transformers' order, exactly


def test_the_seeded_twin_draws_torch_randperm():
    from tokenport.rng.torch_randperm import seeded_randperm

    torch = pytest.importorskip("torch")
    for n, seed in ((0, 0), (1, 3), (2, 0), (624, 1), (625, 2**32 - 1), (5003, 12345)):
        expected = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
        np.testing.assert_array_equal(seeded_randperm(n, seed), expected)
