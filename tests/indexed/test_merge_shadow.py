"""merge against a shadow model: random merges over clean, corrupt and other-tokenizer stores. A merge
the model says succeeds writes exactly the concatenation; any other is refused with a TokenportError
and leaves every file in the directory as it was (nothing published, nothing left behind)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.errors import TokenportError

TOKENIZERS = {
    "a": {"kind": "hf", "fingerprint": "sha256:aa", "vocab_size": 1000, "eod_id": 999},
    "b": {"kind": "hf", "fingerprint": "sha256:bb", "vocab_size": 1000, "eod_id": 999},
}


def _snapshot(directory) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def _read(prefix) -> list[list[int]]:
    with tp.IndexedDataset(prefix) as store:
        return [store[i].tolist() for i in range(len(store))]


@pytest.mark.parametrize("seed", [0, 1])
def test_random_merges_match_the_model_and_refusals_change_nothing(tmp_path, seed):
    rng = random.Random(seed)
    data = np.random.default_rng(seed)
    model: dict[
        str, tuple[list[list[int]] | None, str | None]
    ] = {}  # name -> (documents or None if corrupt, tokenizer)
    for k in range(5):
        name, tokenizer = f"in{k}", "b" if k == 4 else "a"
        documents = [
            data.integers(0, 999, int(data.integers(1, 30))).tolist() for _ in range(int(data.integers(1, 40)))
        ]
        build_store(
            tmp_path / name, documents, dtype=np.uint16, tokenizer=TOKENIZERS[tokenizer], checksum_block_size=128
        )
        model[name] = (documents, tokenizer)
    outputs = ["out0", "out1", "out2"]
    for step in range(30):
        clean = [n for n, (docs, _) in model.items() if docs]
        if clean and rng.random() < 0.15:  # damage a clean store in place, same length
            name = rng.choice(clean)
            path = tmp_path / f"{name}.bin"
            raw = bytearray(path.read_bytes())
            raw[rng.randrange(len(raw))] ^= 0x01
            path.write_bytes(bytes(raw))
            model[name] = (None, model[name][1])
            continue
        inputs = rng.sample(sorted(model), rng.randint(1, 3))
        output = rng.choice(outputs)
        overwrite = rng.random() < 0.6
        tokenizers = {model[n][1] for n in inputs}
        refused = (
            output in inputs
            or (output in model and not overwrite)
            or len(tokenizers) > 1
            or any(model[n][0] is None for n in inputs)
        )
        before = _snapshot(tmp_path)
        try:
            tp.merge(tmp_path / output, [tmp_path / n for n in inputs], overwrite=overwrite)
        except TokenportError:
            assert refused, f"step {step}: merge {inputs} -> {output} refused, the model says it succeeds"
            assert _snapshot(tmp_path) == before, f"step {step}: a refused merge changed files"
            continue
        assert not refused, f"step {step}: merge {inputs} -> {output} succeeded, the model says refused"
        expected = [doc for n in inputs for doc in model[n][0]]
        model[output] = (expected, tokenizers.pop())
        assert _read(tmp_path / output) == expected
        after = _snapshot(tmp_path)
        changed = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
        assert all(name.startswith(output + ".") for name in changed), f"step {step}: {changed}"
        assert tp.verify(tmp_path / output).checksums.startswith("verified")
