"""Blend specs: Megatron's --data-path / --data-args-path / per-split JSON forms, and YAML specs with groups."""

from __future__ import annotations

import json
import math
import os
import random
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.builder.specs import (
    Blend,
    BlendSpec,
    blend_from_args_file,
    blend_from_list,
    blend_per_split_from_json,
    load_blend_spec,
    store_tokens,
)
from tokenport.errors import ConfigError, StorageError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from megatron.core.datasets.utils import get_blend_from_list, normalize


def _write_store(prefix, lengths) -> str:
    """A real store at `prefix` with one document per length."""
    rng = np.random.default_rng(len(lengths))
    return build_store(prefix, (rng.integers(3, 1000, n) for n in lengths), dtype=np.uint16)


def _spec(tmp_path, text: str, name: str = "spec.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _error(excinfo, *parts: str) -> None:
    """Assert the error message holds every part."""
    message = str(excinfo.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


# -- Blend and BlendSpec ---------------------------------------------------------------------------


def test_blend_keeps_tuples_floats_and_is_hashable():
    blend = Blend(["a", "b"], [1, 3])
    assert blend.prefixes == ("a", "b") and blend.weights == (1.0, 3.0)
    assert blend == Blend(("a", "b"), (1.0, 3.0)) and hash(blend) == hash(Blend(("a", "b"), (1.0, 3.0)))
    assert blend.as_megatron() == (["a", "b"], [1.0, 3.0])
    assert Blend(["a"]).as_megatron() == (["a"], None) and Blend(["a"]).normalized() is None


def test_normalized_matches_megatron_bit_for_bit():
    rng = random.Random(3)
    for _ in range(200):
        weights = [
            rng.choice([rng.random(), rng.uniform(0, 1e6), float(rng.randint(0, 100)), 1e-9])
            for _ in range(rng.randint(1, 12))
        ]
        weights[0] = weights[0] or 1.0
        blend = Blend([f"p{i}" for i in range(len(weights))], weights)
        assert blend.normalized() == normalize(weights)


def test_without_zero_weights_drops_only_zeros():
    blend = Blend(["a", "b", "c"], [0.5, 0, 2])
    assert blend.without_zero_weights() == Blend(["a", "c"], [0.5, 2.0])
    same = Blend(["a", "b"], [1, 2])
    assert same.without_zero_weights() is same
    assert Blend(["a"]).without_zero_weights() == Blend(["a"])


@pytest.mark.parametrize(
    "prefixes, weights, parts",
    [
        (["a", "b"], [1.0, -0.5], ["entry 1", "'b'", "-0.5", ">= 0"]),
        (["a", "b"], [float("nan"), 1.0], ["entry 0", "'a'", "nan", "finite"]),
        (["a", "b"], [1.0, float("inf")], ["entry 1", "'b'", "inf", "finite"]),
        (["a", "b"], [0, 0.0], ["every weight", "positive"]),
        (["a", "b"], [1.0], ["2 prefixes", "one weight per prefix"]),
        (["a", "b"], [1.0, "2"], ["entry 1", "not a number"]),
        (["a", "b"], [1.0, True], ["entry 1", "not a number"]),
        (["a", " "], None, ["entry 1", "non-empty string"]),
        ([], None, ["non-empty list"]),
        ("ab", None, ["non-empty list"]),
    ],
)
def test_blend_rejects_bad_entries(prefixes, weights, parts):
    with pytest.raises(ConfigError) as excinfo:
        Blend(prefixes, weights)
    _error(excinfo, *parts)


def test_blend_spec_takes_exactly_one_form():
    blend = Blend(["a"])
    assert BlendSpec(blend=blend).blend == blend
    spec = BlendSpec(per_split={"train": blend, "test": Blend(["t"])})
    assert spec.per_split == (blend, None, Blend(["t"])) and spec.blend is None
    assert BlendSpec(per_split=[None, blend, None]).per_split == (None, blend, None)
    for kwargs, part in [
        ({}, "neither"),
        ({"blend": blend, "per_split": (blend, None, None)}, "both"),
        ({"blend": ["a"]}, "must be a Blend"),
        ({"per_split": {"train": blend, "eval": blend}}, "unknown split(s) eval"),
        ({"per_split": (blend, None)}, "for each of train, valid, test"),
        ({"per_split": (blend, "b", None)}, "for each of train, valid, test"),
        ({"per_split": {}}, "no split has a blend"),
    ]:
        with pytest.raises(ConfigError) as excinfo:
            BlendSpec(**kwargs, source="run.yaml")
        _error(excinfo, "run.yaml", part)


# -- Megatron's --data-path list --------------------------------------------------------------------


def _random_weight(rng: random.Random) -> str:
    """A weight as Megatron users write one: integer, decimal, scientific, padded."""
    value = rng.choice(
        [str(rng.randint(1, 100)), repr(rng.random()), f"{rng.uniform(0.01, 50):.3e}", f"{rng.uniform(0, 10):.2f}", "0"]
    )
    return rng.choice(["", " "]) + value + rng.choice(["", "\t"])


def _random_prefix(rng: random.Random) -> str:
    """A prefix (never a number) with optional surrounding whitespace that both sides strip."""
    name = rng.choice(["/data/", "s3://bucket/", "rel/", ""]) + rng.choice(["wiki", "cc_part", "code-py"])
    return rng.choice(["", " "]) + name + str(rng.randint(0, 999)) + rng.choice(["", " ", "\n"])


def test_blend_from_list_equals_megatron_on_random_inputs():
    rng = random.Random(1234)
    forms = set()
    for case in range(600):
        n = rng.randint(1, 8)
        form = case % 3
        if form == 0:  # weighted pairs
            weights = [_random_weight(rng) for _ in range(n)]
            if all(float(w) == 0 for w in weights):
                weights[0] = "1"
            items = [x for w in weights for x in (w, _random_prefix(rng))]
        elif form == 1:  # even number of prefixes without weights
            items = [_random_prefix(rng) for _ in range(2 * n)]
        else:  # odd count: prefixes only, even if some look like numbers
            items = [_random_prefix(rng) for _ in range(2 * n - 1)]
            items[rng.randrange(len(items))] = rng.choice(["30", _random_prefix(rng)])
        expected = get_blend_from_list(items)
        got = blend_from_list(items)
        assert got.as_megatron() == expected, items
        if expected[1] is not None:
            assert got.normalized() == normalize(expected[1])
        forms.add(expected[1] is None)
    assert forms == {True, False}


def test_blend_from_list_examples():
    assert blend_from_list(["30", "a", "70", "b"]) == Blend(("a", "b"), (30.0, 70.0))
    assert blend_from_list(["1e-2", " a ", "2.5E1", "b"]) == Blend(("a", "b"), (0.01, 25.0))
    assert blend_from_list(["a", "b"]) == Blend(("a", "b"))
    assert blend_from_list(["30", "a", "b"]) == Blend(("30", "a", "b"))


def test_mixed_weight_positions_are_an_error_not_megatrons_silent_prefixes():
    items = ["30", "a", "wiki", "b"]
    assert get_blend_from_list(items) == (items, None)  # Megatron: silently "all prefixes"
    with pytest.raises(ConfigError) as excinfo:
        blend_from_list(items)
    _error(excinfo, "items[0]='30'", "items[2]='wiki'", "mix numbers")


@pytest.mark.parametrize(
    "items, parts",
    [
        (["-1", "a", "2", "b"], ["items", "entry 0", "'a'", "-1.0"]),
        (["nan", "a", "2", "b"], ["items", "entry 0", "nan"]),
        (["1", "a", "inf", "b"], ["items", "entry 1", "'b'", "inf"]),
        (["0", "a", "0.0", "b"], ["items", "every weight"]),
        (["1", " "], ["items", "entry 0", "non-empty"]),
        ([], ["items", "non-empty list"]),
        ("a b", ["items", "non-empty list"]),
        (["1", 2], ["items[1] = 2", "string"]),
    ],
)
def test_blend_from_list_errors(items, parts):
    with pytest.raises(ConfigError) as excinfo:
        blend_from_list(items)
    _error(excinfo, *parts)


# -- --data-args-path and --per-split-data-args-path -------------------------------------------------


def test_args_file_splits_on_any_whitespace(tmp_path):
    text = "0.3 /data/wiki\n\t0.7\n  s3://bucket/cc  \n"
    path = _spec(tmp_path, text, "args.txt")
    blend = blend_from_args_file(path)
    assert blend.as_megatron() == get_blend_from_list(text.split())
    assert blend == Blend(("/data/wiki", "s3://bucket/cc"), (0.3, 0.7))
    assert blend_from_args_file(_spec(tmp_path, "a\nb c\n", "plain.txt")) == Blend(("a", "b", "c"))


def test_args_file_errors_name_the_file(tmp_path):
    bad = _spec(tmp_path, "0.5 a -1 b", "bad.txt")
    with pytest.raises(ConfigError) as excinfo:
        blend_from_args_file(bad)
    _error(excinfo, bad, "entry 1", "'b'", "-1.0")
    mixed = _spec(tmp_path, "0.5 a x b", "mixed.txt")
    with pytest.raises(ConfigError) as excinfo:
        blend_from_args_file(mixed)
    _error(excinfo, mixed, "word[0]='0.5'", "word[2]='x'")
    empty = _spec(tmp_path, " \n", "empty.txt")
    with pytest.raises(ConfigError) as excinfo:
        blend_from_args_file(empty)
    _error(excinfo, empty, "non-empty list")
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(ConfigError) as excinfo:
        blend_from_args_file(missing)
    _error(excinfo, missing, "cannot read")


def test_per_split_json(tmp_path):
    data = {"train": ["30", "wiki", "70", "cc"], "valid": "wiki_valid code_valid  ", "test": None}
    spec = blend_per_split_from_json(_spec(tmp_path, json.dumps(data), "splits.json"))
    assert spec.blend is None
    train, valid, test = spec.per_split
    assert train.as_megatron() == get_blend_from_list(data["train"])
    assert valid.as_megatron() == get_blend_from_list(data["valid"].split())
    assert test is None
    only_train = blend_per_split_from_json(_spec(tmp_path, '{"train": ["a"]}', "t.json"))
    assert only_train.per_split == (Blend(("a",)), None, None)


@pytest.mark.parametrize(
    "text, parts",
    [
        ('{"train": ["a"], "eval": ["b"], "dev": []}', ["unknown key(s) dev, eval", "train, valid, test"]),
        ('["a", "b"]', ["JSON object"]),
        ('{"train": ["1", "a", "-2", "b"]}', ["train: entry 1", "'b'", "-2.0"]),
        ('{"train": ["1", "a", "x", "b"]}', ["train[0]='1'", "train[2]='x'"]),
        ('{"valid": []}', ["valid", "non-empty list"]),
        ('{"train": {"a": 1}}', ["train", "non-empty list"]),
        ('{"train": null}', ["no split has a blend"]),
        ('{"train": ["a"],}', ["not valid JSON", "line 1"]),
    ],
)
def test_per_split_json_errors_name_the_file(tmp_path, text, parts):
    path = _spec(tmp_path, text, "splits.json")
    with pytest.raises(ConfigError) as excinfo:
        blend_per_split_from_json(path)
    _error(excinfo, path, *parts)


# -- YAML / JSON specs with groups ----------------------------------------------------------------------


@pytest.fixture()
def stores(tmp_path):
    """Real stores: wiki, three cc parts of different token counts, python and js."""
    (tmp_path / "data" / "cc").mkdir(parents=True)
    _write_store(tmp_path / "data" / "wiki", [5, 7])
    _write_store(tmp_path / "data" / "cc" / "part-0", [10, 20, 3])
    _write_store(tmp_path / "data" / "cc" / "part-1", [100])
    _write_store(tmp_path / "data" / "cc" / "part-2", [1, 2, 4, 8])
    _write_store(tmp_path / "data" / "python", [9])
    _write_store(tmp_path / "data" / "js", [4])
    return str(tmp_path / "data")


GROUPS = """
blend:
  - {path: data/wiki, weight: 0.2}
  - name: en-cc
    weight: 0.5
    parts: ["data/cc/part-*"]
  - name: code
    weight: 0.3
    blend:
      - {path: data/python, weight: 2}
      - {path: data/js, weight: 1}
"""


def test_groups_with_parts_and_nesting(tmp_path, stores):
    spec = load_blend_spec(_spec(tmp_path, GROUPS))
    assert spec.per_split is None and spec.source == str(tmp_path / "spec.yaml")
    d = stores
    parts = [f"{d}/cc/part-0", f"{d}/cc/part-1", f"{d}/cc/part-2"]
    assert spec.blend.prefixes == (f"{d}/wiki", *parts, f"{d}/python", f"{d}/js")
    tokens = [33, 100, 15]
    assert [store_tokens(p) for p in parts] == tokens
    top = normalize([0.2, 0.5, 0.3])
    code = normalize([2, 1])
    expected = [top[0]] + [top[1] * (t / sum(tokens)) for t in tokens] + [top[2] * code[0], top[2] * code[1]]
    assert list(spec.blend.weights) == expected  # exactly: group weight x part tokens / group tokens
    assert math.isclose(sum(spec.blend.weights), 1.0, rel_tol=1e-12)


def test_parts_globs_strip_suffixes_deduplicate_and_sort(tmp_path, stores):
    text = """
    train:
      - {weight: 1, parts: ["data/cc/part-2.bin", "data/cc/part-[01].idx", "data/cc/part-0*", "data/cc/part-1"]}
    """
    spec = load_blend_spec(_spec(tmp_path, text))
    train, valid, test = spec.per_split
    assert valid is None and test is None
    assert train.prefixes == tuple(f"{stores}/cc/part-{i}" for i in range(3))
    assert list(train.weights) == [1.0 * share for share in normalize([33, 100, 15])]


def test_injected_size_of_and_deep_nesting(tmp_path):
    text = """
    blend:
      - weight: 1
        blend:
          - weight: 3
            blend: [{path: a, weight: 1}, {weight: 1, parts: [b, c]}]
          - {path: s3://bucket/d, weight: 1}
      - {path: /abs/e, weight: 1}
    """
    sizes = {str(tmp_path / "b"): 1, str(tmp_path / "c"): 3}
    spec = load_blend_spec(_spec(tmp_path, text), size_of=sizes.__getitem__)
    assert spec.blend.prefixes == (
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        str(tmp_path / "c"),
        "s3://bucket/d",
        "/abs/e",
    )
    half, three_quarters = 0.5, 0.75
    assert list(spec.blend.weights) == [
        half * three_quarters * 0.5,
        half * three_quarters * 0.5 * 0.25,
        half * three_quarters * 0.5 * 0.75,
        half * 0.25,
        half,
    ]


def test_json_spec_and_per_split_yaml(tmp_path):
    spec = load_blend_spec(_spec(tmp_path, json.dumps({"blend": [{"path": "x", "weight": 1}]}), "spec.json"))
    assert spec.blend == Blend((str(tmp_path / "x"),), (1.0,))
    text = """
    train: [{path: t1, weight: 1}, {path: t2, weight: 3}]
    valid: [v1, v2]
    test:
    """
    train, valid, test = load_blend_spec(_spec(tmp_path, text)).per_split
    assert train == Blend((str(tmp_path / "t1"), str(tmp_path / "t2")), (0.25, 0.75))
    assert valid == Blend((str(tmp_path / "v1"), str(tmp_path / "v2")))
    assert test is None


def test_flat_megatron_form_in_yaml(tmp_path):
    quoted = load_blend_spec(_spec(tmp_path, 'blend: ["0.3", "path1", "0.7", "s3://b/path2"]'))
    expected_weights = normalize(get_blend_from_list(["0.3", "path1", "0.7", "s3://b/path2"])[1])
    assert quoted.blend == Blend((str(tmp_path / "path1"), "s3://b/path2"), tuple(expected_weights))
    unquoted = load_blend_spec(_spec(tmp_path, "blend: [0.3, path1, 0.7, s3://b/path2]"))
    assert unquoted == quoted
    bare = load_blend_spec(_spec(tmp_path, "blend: [a, ./b.bin, c]"))
    assert bare.blend == Blend((str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")))
    nested = load_blend_spec(_spec(tmp_path, "blend: [{weight: 1, blend: [1, a, 3, b]}, {path: c, weight: 1}]"))
    assert list(nested.blend.weights) == [0.5 * 0.25, 0.5 * 0.75, 0.5]
    zero = load_blend_spec(_spec(tmp_path, "blend: [0, a, 2, b]"))
    assert zero.blend == Blend((str(tmp_path / "b"),), (1.0,))


def test_zero_weights_drop_subtrees_without_reading_them(tmp_path, stores):
    text = """
    blend:
      - {path: data/wiki, weight: 1}
      - {path: data/missing, weight: 0}
      - {name: gone, weight: 0, parts: ["nowhere/part-*", "no/such/store"]}
      - name: gone-group
        weight: 0.0
        blend: [{path: x, weight: 0}, {weight: 0, parts: [y]}]
      - name: half-gone
        weight: 1
        blend: [{path: data/js, weight: 0}, {path: data/python, weight: 5}]
    """
    spec = load_blend_spec(_spec(tmp_path, text))
    assert spec.blend == Blend((f"{stores}/wiki", f"{stores}/python"), (0.5, 0.5))


def test_duplicate_prefixes_are_an_error_naming_both_entries(tmp_path, stores):
    text = """
    blend:
      - {path: data/cc/part-1, weight: 1}
      - {weight: 1, parts: ["data/cc/part-*"]}
    """
    path = _spec(tmp_path, text)
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(path)
    _error(excinfo, path, "blend[1].parts", "already in the blend at blend[0].path", "part-1")
    again = _spec(tmp_path, "blend: [{path: a, weight: 1}, {weight: 1, blend: [{path: ./a.idx, weight: 1}]}]", "d.yaml")
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(again)
    _error(excinfo, again, "blend[1].blend[0].path", "blend[0].path")
    flat = _spec(tmp_path, "blend: [{path: b, weight: 1}, {weight: 1, blend: [1, a, 1, b]}]", "flat.yaml")
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(flat)
    _error(excinfo, flat, "blend[1].blend[3]", "blend[0].path")
    bare = _spec(tmp_path, "train: [a, b, a]", "bare.yaml")
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(bare)
    _error(excinfo, bare, "train[2]", "train[0]")


@pytest.mark.parametrize(
    "text, parts",
    [
        (
            "blend: [{path: a, weight: 1}, {weight: 1, blend: [{path: b, weight: -2}]}]",
            ["blend[1].blend[0].weight", "-2", ">= 0"],
        ),
        ("blend: [{path: a, weight: .nan}]", ["blend[0].weight", "nan", "finite"]),
        ("blend: [{path: a, weight: .inf}]", ["blend[0].weight", "inf", "finite"]),
        ("blend: [{path: a, weight: 'inf'}]", ["blend[0].weight", "inf"]),
        ("blend: [{path: a, weight: true}]", ["blend[0].weight", "True"]),
        ("blend: [{path: a, weight: 0}, {path: b, weight: 0}]", ["blend:", "every weight is 0"]),
        (
            "blend: [{path: a, weight: 1}, {weight: 2, blend: [{path: b, weight: 0}]}]",
            ["blend[1].blend:", "every weight is 0"],
        ),
        ("blend: [{path: a}]", ["blend[0]:", "missing 'weight'"]),
        ("blend: [{path: a, weight: 1, wieght: 2}]", ["blend[0]", "unknown key(s) wieght"]),
        ("blend: [{path: a, parts: [b], weight: 1}]", ["blend[0]:", "exactly one of", "path, parts"]),
        ("blend: [{weight: 1}]", ["blend[0]:", "exactly one of", "none"]),
        ("blend: [{path: a, weight: 1, name: 3}]", ["blend[0].name", "string"]),
        ("blend: [{path: '', weight: 1}]", ["blend[0].path", "non-empty"]),
        ("blend: [{weight: 1, parts: []}]", ["blend[0].parts", "non-empty list"]),
        ("blend: [{weight: 1, parts: [a, 5]}]", ["blend[0].parts[1]", "non-empty"]),
        ("blend: [{weight: 1, parts: ['data/*.bin']}]", ["blend[0].parts[0]", "matches no .bin/.idx"]),
        ("blend: [{weight: 1, parts: ['s3://b/part-*']}]", ["blend[0].parts[0]", "local paths only"]),
        ("blend: [{weight: 1, blend: [a, b]}]", ["blend[0].blend", "whole split"]),
        ("blend: [{weight: 1, blend: {path: a}}]", ["blend[0].blend", "non-empty list of entries"]),
        ("blend: [{path: a, weight: 1}, b]", ["blend:", "non-empty list of entries"]),
        ("blend: []", ["blend:", "non-empty list of entries"]),
        ("blend: [0.5, a, x, b]", ["blend[0]='0.5'", "blend[2]='x'"]),
        ("blend: [-1, a, 1, b]", ["blend: entry 0", "'a'", "-1.0"]),
        ("blend: [a]\ntrain: [b]", ["not both"]),
        ("blend: [a]\nsplit: 1", ["unknown key(s) split"]),
        ("train:\nvalid:", ["no split has a blend"]),
        ("- a\n- b", ["expected a mapping"]),
        ("blend: [a\n  b: c", ["not valid YAML"]),
    ],
)
def test_spec_errors_name_the_file_and_entry(tmp_path, text, parts):
    (tmp_path / "data").mkdir()
    path = _spec(tmp_path, text)
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(path)
    _error(excinfo, path, *parts)


def test_missing_spec_and_missing_store(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(missing)
    _error(excinfo, missing, "cannot read")
    path = _spec(tmp_path, "blend: [{weight: 1, parts: [data/absent]}]")
    with pytest.raises(StorageError) as excinfo:
        load_blend_spec(path)
    _error(excinfo, path, "blend[0].parts", "absent.idx", "not found")


def test_parts_without_tokens(tmp_path):
    os.makedirs(tmp_path / "data")
    _write_store(tmp_path / "data" / "empty", [])
    path = _spec(tmp_path, "blend: [{path: x, weight: 1}, {weight: 1, parts: [data/empty]}]")
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(path)
    _error(excinfo, path, "blend[1].parts", "hold no tokens")
    bad_size = _spec(tmp_path, "blend: [{weight: 1, parts: [a]}]", "size.yaml")
    with pytest.raises(ConfigError) as excinfo:
        load_blend_spec(bad_size, size_of=lambda prefix: -1)
    _error(excinfo, bad_size, "blend[0].parts", "token count >= 0")


def test_schedule_key_gives_the_shared_blend_a_mixture_schedule(tmp_path, stores):
    text = """
blend:
  - {path: data/wiki, weight: 1}
  - {path: data/python, weight: 1}
schedule:
  - {at: 0, weights: [0.9, 0.1]}
  - {at: 1000, ramp_to: [0.5, 0.5], until: 2000}
"""
    spec = load_blend_spec(_spec(tmp_path, text))
    assert spec.blend.schedule is not None and spec.blend.schedule.num_datasets == 2
    assert spec.blend.schedule.phases[1].end_weights == (0.5, 0.5)
    wrong = text.replace("[0.9, 0.1]", "[0.9, 0.05, 0.05]").replace("[0.5, 0.5]", "[0.4, 0.3, 0.3]")
    with pytest.raises(ConfigError, match="spec.yaml: schedule: its phases weigh 3 datasets but the blend has 2"):
        load_blend_spec(_spec(tmp_path, wrong))
    per_split = "train: [{path: data/wiki, weight: 1}]\nschedule: [{at: 0, weights: [1]}]\n"
    with pytest.raises(ConfigError, match="'schedule' goes with a shared 'blend'"):
        load_blend_spec(_spec(tmp_path, per_split))


def _megatron_reads(items):
    """get_blend_from_list's (prefixes, weights), or None where it raises or reads no usable blend."""
    try:
        prefixes, weights = get_blend_from_list(items)
    except Exception:
        return None
    if weights is not None and not all(math.isfinite(w) and w >= 0 for w in weights):
        return None
    return prefixes, weights


def test_mutated_per_split_json_is_refused_or_read_as_megatron_reads_it(tmp_path):
    """The per-split JSON with numeric weights, mutated: a ConfigError, or each split's blend exactly what
    megatron-core's get_blend_from_list reads from it (never another exception, never other data)."""
    from tests._support.mutate import mutations

    document = json.dumps({"train": [30, "a", 70.5, "b"], "valid": "1 c 2 d", "test": ["e"]})
    path = tmp_path / "splits.json"
    for label, data in mutations(document):
        path.write_bytes(data)
        try:
            spec = blend_per_split_from_json(path)
        except tp.TokenportError:
            continue
        parsed = json.loads(data)
        for name, blend in zip(("train", "valid", "test"), spec.per_split):
            value = parsed.get(name)
            if value is None:
                assert blend is None, label
                continue
            expected = _megatron_reads(value.split() if isinstance(value, str) else value)
            assert expected is not None and blend.as_megatron() == (expected[0], expected[1]), label


@pytest.mark.parametrize("seed", range(3))
def test_random_data_path_lists_are_refused_or_read_as_megatron_reads_them(seed):
    """Random ``--data-path`` lists of numbers, numeric strings, names and odd items: a ConfigError, or
    exactly megatron-core's reading (bools refused though it reads them as 1)."""
    rng = random.Random(seed)
    pool = [7, 0.25, "12", " 3.5 ", "1e2", "x", "path/a", " path/b ", None, True, -2, float("nan"), np.int64(4)]
    read = 0
    for _ in range(400):
        items = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        try:
            blend = blend_from_list(items)
        except ConfigError:
            continue
        expected = _megatron_reads(items)
        assert expected is not None, items
        assert blend.as_megatron() == expected, items
        read += 1
    assert read >= 20  # enough lists are valid for the comparison to mean something
