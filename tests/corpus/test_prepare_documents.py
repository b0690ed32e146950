"""Prepare's persisted documents through the schema layer: the dataset manifest, the run state and the
steps file, each mutated every way; each read gives a TokenportError naming the file, or the valid
document's result, and a refusal changes nothing."""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

from tests._support.mutate import mutations
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.inputs.inflate import inflate
from tokenport.corpus.inputs.sources import expand_inputs
from tokenport.corpus.run import pipeline
from tokenport.corpus.run.config import load_steps
from tokenport.corpus.run.state import OutputDir
from tokenport.corpus.run.units import plan_units
from tokenport.corpus.run.worker import finished_unit
from tokenport.errors import ConfigError, TokenportError

TEXTS = [f"Line {i} of a small corpus about bridges and rivers." for i in range(12)]


def files(directory: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def config(tmp_path: pathlib.Path) -> PrepareConfig:
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    (tmp_path / "b.txt").write_text("One whole text file.")
    inputs = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.txt")]
    return PrepareConfig(inputs=inputs, output=str(tmp_path / "out"), workers=1, unit_bytes=200)


def test_every_mutation_of_the_dataset_manifest_is_refused_or_reads_as_valid(config):
    first = prepare(config)
    path = pathlib.Path(config.output) / "tokenport.json"
    original = path.read_bytes()
    refused = 0
    for label, data in mutations(original):
        path.write_bytes(data)
        before = files(pathlib.Path(config.output))
        try:
            result = prepare(config)
        except TokenportError as error:
            refused += 1
            assert str(path) in str(error) or config.output in str(error), label
        else:  # still a valid manifest of this run: the same parts and totals
            assert (result.parts, result.documents, result.tokens) == (first.parts, first.documents, first.tokens), (
                label
            )
        assert files(pathlib.Path(config.output)) == before, label
    assert refused > 100
    path.write_bytes(original)
    assert prepare(config).resumed_units == first.units


def test_a_damaged_manifest_names_the_field(config):
    prepare(config)
    path = pathlib.Path(config.output) / "tokenport.json"
    manifest = json.loads(path.read_text())
    manifest["parts"][0]["name"] = "../../elsewhere"
    path.write_text(json.dumps(manifest))
    with pytest.raises(TokenportError, match=r"tokenport.json: .*`\$.parts\[0\].name`"):
        prepare(config)
    manifest["parts"][0]["name"] = "part-00000"
    manifest["totals"]["tokens"] += 1
    path.write_text(json.dumps(manifest))
    with pytest.raises(TokenportError, match="totals.tokens is not the sum"):
        prepare(config)
    assert prepare(config, overwrite=True).documents == len(TEXTS) + 1  # overwrite replaces a damaged output


def unfinished(config: PrepareConfig, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """An unfinished run of `config` (stopped before assembly); its state file."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "_assemble", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare(config)
    monkeypatch.undo()
    return pathlib.Path(config.output) / ".work" / "state.json"


def test_every_mutation_of_the_run_state_is_refused_or_resumes(config, monkeypatch):
    path = unfinished(config, monkeypatch)
    original = path.read_bytes()
    state = json.loads(original)
    inputs = expand_inputs(config.inputs, exclude=config.output)
    refused = 0
    for label, data in mutations(original):
        path.write_bytes(data)
        before = files(pathlib.Path(config.output))
        try:
            OutputDir(config.output).claim(state["settings"], state["fingerprint"], inputs).release()
        except TokenportError as error:
            refused += 1
            assert str(path) in str(error) or config.output in str(error), label
        assert files(pathlib.Path(config.output)) == before, label
    assert refused > 30
    path.write_bytes(original)
    assert prepare(config).resumed_units > 0


def test_a_damaged_run_state_names_the_field_and_overwrite_starts_over(config, monkeypatch):
    path = unfinished(config, monkeypatch)
    state = json.loads(path.read_text())
    state["inputs"] = "a.jsonl"
    path.write_text(json.dumps(state))
    with pytest.raises(TokenportError, match=r"state.json: Expected `array \| null`, got `str` - at `\$.inputs`"):
        prepare(config)
    assert prepare(config, overwrite=True).documents == len(TEXTS) + 1


STEPS = [{"step": "pii", "kinds": ["email", "phone"]}, {"step": "c4", "min_words_per_line": 3}]


@pytest.mark.parametrize(
    "steps, field",
    [
        (
            [{"step": "pii", "kinds": "email"}],
            r"steps\[0\] \(pii\): option 'kinds'='email' is a string.*write it as a list: kinds: \[email\]",
        ),
        ([{"step": "c4", "remove_citations": 1}], r"steps\[0\] \(c4\): option 'remove_citations'=1"),
        ([{"step": "c4", "min_words_per_line": "3"}], r"option 'min_words_per_line'='3'"),
        ([{"step": "gopher_quality", "min_words": True}], r"option 'min_words'=True"),
        ([{"step": ["pii"]}], r"steps\[0\]: unknown step \['pii'\]"),
        ([{"step": "pii", "kind": ["email"]}], r"unexpected option 'kind' \(did you mean 'kinds'\?\)"),
        ({"steps": STEPS, "step": "pii"}, r"a mapping with only the key 'steps'"),
        ({"step": "pii"}, r"a mapping with only the key 'steps'"),
        ("pii", r"expected a list of step specs"),
        (["pii"], r"steps\[0\]: expected a mapping with a 'step' key"),
    ],
)
def test_a_steps_file_of_wrong_types_or_keys_is_refused_naming_file_and_field(tmp_path, steps, field):
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(steps))
    with pytest.raises(ConfigError, match=f"{path}: .*{field}"):
        load_steps(path)


def test_every_mutation_of_a_steps_file_is_refused_or_reads_as_valid(tmp_path):
    path = tmp_path / "steps.json"
    for label, data in mutations(json.dumps({"steps": STEPS})):
        path.write_bytes(data)
        try:
            steps = load_steps(path)
        except ConfigError as error:
            assert str(path) in str(error), label
        else:  # a mutation that is still valid (a list without a step, say): known kinds, typed options
            assert {spec["step"] for spec in steps} <= {"pii", "c4"}, label
            assert PrepareConfig(inputs=["x"], output="y", steps=steps).steps == tuple(steps), label


def test_every_mutation_of_a_unit_stats_file_is_refused_or_reads_as_valid(config, monkeypatch):
    unfinished(config, monkeypatch)
    work = pathlib.Path(config.output) / ".work"
    units = plan_units(expand_inputs(config.inputs, exclude=config.output), config.unit_bytes)
    unit = next(u for u in units if any(piece.format == "text" for piece in u.slices))  # read whole: digested
    original = finished_unit(str(work), unit)
    assert original is not None and original.digests
    path = work / f"{unit.name}.stats.json"
    data = path.read_bytes()
    refused = 0
    for label, mutated in [*mutations(data), ("documents_per_slice of another unit", b"")]:
        if label.startswith("documents_per_slice"):  # counts that fit the file but not the unit's store
            doc = json.loads(data)
            doc["documents_per_slice"] = [doc["stats"]["documents"] + 1]
            doc["stats"]["documents"] += 1
            mutated = json.dumps(doc).encode()
        path.write_bytes(mutated)
        before = files(work)
        try:
            record = finished_unit(str(work), unit)
        except TokenportError as error:
            refused += 1
            assert str(path) in str(error), label
        else:
            assert record is not None and record.documents_per_slice == original.documents_per_slice, label
            assert (record.stats.documents, record.stats.tokens) == (original.stats.documents, original.stats.tokens)
        assert files(work) == before, label
    assert refused > 30
    path.write_bytes(data)
    assert prepare(config).documents == len(TEXTS) + 1


def test_every_mutation_of_a_decompression_plan_is_refused_or_reads_as_valid(tmp_path):
    source = tmp_path / "a.jsonl.gz"
    source.write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in TEXTS).encode()))
    (file,) = expand_inputs([str(source)], exclude=str(tmp_path / "out"))
    root = tmp_path / "inflated"
    chunks = inflate(file, 200, str(root))
    assert chunks is not None and len(chunks) > 1
    (plan,) = root.rglob("plan.json")
    data = plan.read_bytes()
    refused = 0
    for label, mutated in mutations(data):
        plan.write_bytes(mutated)
        before = files(root)
        try:
            again = inflate(file, 200, str(root))
        except TokenportError as error:
            refused += 1
            assert str(plan) in str(error), label
        else:  # a valid plan: the same chunks (the lines before one are checked only for order), or none
            assert again is None or [(c, size) for c, _, size in again] == [(c, size) for c, _, size in chunks], label
        assert files(root) == before, label
    assert refused > 30
