"""Fuzzing corrupt stores: hundreds of seeded mutations read through every path, in subprocesses.

Each mutation (byte flips, overwritten index fields, truncations, junk appended, a .bin from
another store, manifest edits) is applied to a copy of a small store, which is then read in
mmap, pread and remote (moto S3) modes: ds[i], get, get_many, GPT samples (memory-mapped kernel
and window path), the manifest, and verify. The only allowed outcomes are the right data or a
TokenportError. "Right" is what the original index describes over the mutated .bin when only
token bytes changed, else the original data; verify must fail whenever .bin or .idx changed.
One exception, by nature: document indices changed into another valid rising partition are
sound structure, so readers may return them; only verify (the .idx checksum) can and must tell.
Workers run as subprocesses, so a segmentation fault is a failed test, not a crashed pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import traceback

import numpy as np

MUTATIONS = 480
WORKERS = 4
REMOTE_EVERY = 6  # one mutation in this many is also read through S3 (moto), which costs ~10 GETs
SEED = 20261123
NASTY = (0, 1, -1, -2, 2**31 - 1, -(2**31), 2**32 - 1, 2**62, -(2**63), 1000, 70000)
SEQ_LENGTH = 16


# -- the stores and their mutations ------------------------------------------------------------------


def make_stores(directory: str) -> list[str]:
    """Two small stores (uint16 with multi-sequence documents, int32), with manifests."""
    from tests._support.stores import Doc, build_store

    rng = np.random.default_rng(SEED)

    def documents(high: int):
        for _ in range(24):
            lengths = rng.integers(0 if rng.random() < 0.1 else 1, 40, int(rng.integers(1, 4)))
            tokens = rng.integers(1, high, int(lengths.sum()))
            tokens[rng.random(len(tokens)) < 0.1] = 0  # some EODs
            yield Doc(tokens, lengths=lengths)

    return [
        build_store(os.path.join(directory, name), documents(high), dtype=dtype)
        for name, dtype, high in (("u16", np.uint16, 30000), ("i32", np.int32, 2**31 - 1))
    ]


def mutate(rng: np.random.Generator, prefix: str, other: str) -> dict:
    """Apply one random mutation to the store at `prefix`; what was done, and which files changed."""
    kind = str(rng.choice(["idx_flip", "idx_field", "bin_flip", "truncate", "append", "other_bin", "manifest"]))
    paths = {suffix: prefix + suffix for suffix in (".bin", ".idx", ".json")}
    if kind == "idx_flip":
        data = bytearray(open(paths[".idx"], "rb").read())
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, 34)) if rng.random() < 0.4 else int(rng.integers(0, len(data)))
            data[at] ^= int(rng.integers(1, 256))
        open(paths[".idx"], "wb").write(bytes(data))
        return {"kind": kind, "changed": ".idx"}
    if kind == "idx_field":
        import tokenport as tp

        with tp.IndexedDataset(prefix) as ds:
            header, count = ds.header, len(ds)
        field = str(rng.choice(["lengths", "pointers", "documents"]))
        at, size, items = {
            "lengths": (header.lengths_offset, 4, count),
            "pointers": (header.pointers_offset, 8, count),
            "documents": (header.documents_offset, 8, header.document_count),
        }[field]
        index = int(rng.integers(0, items))
        value = int(rng.choice(NASTY)) if rng.random() < 0.7 else int(rng.integers(-100, 5000))
        value = max(min(value, 2 ** (8 * size - 1) - 1), -(2 ** (8 * size - 1)))
        with open(paths[".idx"], "r+b") as f:
            f.seek(at + size * index)
            f.write(value.to_bytes(size, "little", signed=True))
        return {"kind": f"{kind}:{field}[{index}]={value}", "changed": ".idx"}
    if kind == "bin_flip":
        data = bytearray(open(paths[".bin"], "rb").read())
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(0, len(data)))] ^= int(rng.integers(1, 256))
        open(paths[".bin"], "wb").write(bytes(data))
        return {"kind": kind, "changed": ".bin", "same_size": True}
    if kind in ("truncate", "append"):
        suffix = str(rng.choice([".bin", ".idx", ".json"]))
        size = os.path.getsize(paths[suffix])
        if kind == "truncate":
            os.truncate(paths[suffix], int(rng.integers(0, size)))
        else:
            with open(paths[suffix], "ab") as f:
                f.write(rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes())
        return {"kind": f"{kind}{suffix}", "changed": suffix}
    if kind == "other_bin":
        shutil.copyfile(other + ".bin", paths[".bin"])
        return {"kind": kind, "changed": ".bin"}
    return _mutate_manifest(rng, paths[".json"])


def _mutate_manifest(rng: np.random.Generator, path: str) -> dict:
    """Byte flips, or a key of the manifest (or of its checksums) set to a value of a random type."""
    if rng.random() < 0.3:
        data = bytearray(open(path, "rb").read())
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(0, len(data)))] ^= int(rng.integers(1, 256))
        open(path, "wb").write(bytes(data))
        return {"kind": "manifest_flip", "changed": ".json"}
    manifest = json.load(open(path))
    target = manifest["checksums"] if rng.random() < 0.5 else manifest
    key = str(rng.choice(sorted(target)))
    choices = [0, -1, 3, 2**40, "12", "", None, [], {}, 1.5, ["x"], True, "blake2b-128", "uint8"]
    if rng.random() < 0.2:
        del target[key]
        what = f"del {key}"
    else:
        value = choices[int(rng.integers(0, len(choices)))]
        target[key] = value
        what = f"{key}={value!r}"
    json.dump(manifest, open(path, "w"))
    return {"kind": f"manifest:{what}", "changed": ".json"}


# -- reading a store every way --------------------------------------------------------------------------


def observe(prefix: str, mode: str, remote: dict | None = None) -> dict:
    """What each read path returns: a value, or "error" (a TokenportError). Other exceptions propagate."""
    import tokenport as tp

    results: dict[str, object] = {}

    def attempt(name, read):
        try:
            results[name] = read()
        except tp.TokenportError:
            results[name] = "error"

    if remote is not None:
        from tokenport.storage.remote import RemoteOptions

        options = RemoteOptions(storage_options={"endpoint_url": remote["endpoint"]}, block_size=4096, max_retries=0)
        opener = lambda: tp.IndexedDataset(remote["url"], remote_options=options, cache_dir=remote["cache"])  # noqa: E731
    else:
        opener = lambda: tp.IndexedDataset(prefix, mode=mode)  # noqa: E731
    try:
        ds = opener()
    except tp.TokenportError:
        return {"open": "error"}
    attempt("len", lambda: len(ds))
    attempt("items", lambda: [ds[i].tolist() for i in range(len(ds))])
    attempt("get", lambda: [ds.get(i, min(1, int(ds.sequence_lengths[i]))).tolist() for i in range(len(ds))])
    order = np.random.default_rng(0).permutation(len(ds))
    attempt("get_many", lambda: [a.tolist() for a in ds.get_many(order)])
    attempt("documents", lambda: ds.document_indices.tolist())
    attempt("manifest", lambda: ds.manifest is not None)

    def gpt():
        config = tp.GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=0)
        samples = tp.GPTDataset(ds, np.arange(len(ds)), 40, config, 3)
        batch = samples.get_batch(np.arange(len(samples)))
        single = samples[len(samples) - 1]
        return {name: value.tolist() for name, value in batch.items()} | {"single": single["tokens"].tolist()}

    attempt("gpt", gpt)
    ds.close()
    return results


def check_mutation(number: int, originals: list[str], work: str, endpoint: str) -> list[str]:
    """Mutate a copy of one store, read it every way, and list every outcome that is not allowed."""
    import tokenport as tp
    from tokenport.indexed.manifest import Manifest

    rng = np.random.default_rng([SEED, number])
    which = int(rng.integers(0, len(originals)))
    original, other = originals[which], originals[1 - which]
    directory = os.path.join(work, f"m{number}")
    os.makedirs(directory)
    prefix = os.path.join(directory, os.path.basename(original))
    for suffix in (".bin", ".idx", ".json"):
        shutil.copyfile(original + suffix, prefix + suffix)
    mutation = mutate(rng, prefix, other)
    # the reference: the original index over the mutated .bin when only token bytes changed
    reference_prefix = original
    if mutation.get("same_size"):
        reference_prefix = os.path.join(directory, "reference")
        shutil.copyfile(prefix + ".bin", reference_prefix + ".bin")
        shutil.copyfile(original + ".idx", reference_prefix + ".idx")
    reference = observe(reference_prefix, "mmap")
    failures = []
    label = f"mutation {number} ({mutation['kind']} of {os.path.basename(original)})"
    modes = ["mmap", "pread"] + (["remote"] if endpoint and number % REMOTE_EVERY == 0 else [])
    for mode in modes:
        remote = None
        if mode == "remote":
            remote = {
                "endpoint": endpoint,
                "url": _upload(endpoint, prefix, f"fuzz/{number}"),
                "cache": os.path.join(directory, "cache"),
            }
        seen = observe(prefix, mode, remote)
        for name, value in seen.items():
            if value != "error" and name != "manifest" and value != reference[name]:
                failures.append(f"{label}, {mode}: {name} returned wrong data without an error")
    try:
        tp.verify(prefix)
        verified = True
    except tp.TokenportError:
        verified = False
    if not verified:
        # document indices that stay a valid (rising) partition are structurally sound, so only
        # the .idx checksum can tell them from the original: verify must, the readers need not
        failures = [f for f in failures if not f.endswith(": documents returned wrong data without an error")]
    if verified and mutation["changed"] in (".bin", ".idx"):
        failures.append(f"{label}: verify passed a changed {mutation['changed']}")
    if verified and mutation["changed"] == ".json":
        # the block size is not a fact of the store: any size whose blocks hash to the listed digests is right
        def facts(m):
            return (
                m.dtype,
                m.sequences,
                m.documents,
                m.tokens,
                m.checksums.algorithm,
                m.checksums.idx,
                m.checksums.bin_blocks,
            )

        before = Manifest.from_json(open(original + ".json").read(), "original")
        after = Manifest.from_json(open(prefix + ".json").read(), "mutated")
        if facts(after) != facts(before):
            failures.append(f"{label}: verify passed a manifest whose facts changed")
    shutil.rmtree(directory)
    return failures


def _upload(endpoint: str, prefix: str, key: str) -> str:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for suffix in (".bin", ".idx", ".json"):
        with open(prefix + suffix, "rb") as f:
            client.put_object(Bucket="tokenport-test", Key=key + suffix, Body=f.read())
    return f"s3://tokenport-test/{key}"


def worker(work: str, first: int, stop: int, endpoint: str) -> None:
    """Run mutations [first, stop) and print one line each: OK, or FAIL with the reasons."""
    originals = [os.path.join(work, name) for name in ("u16", "i32")]
    for number in range(first, stop):
        print(f"START {number}", flush=True)
        try:
            failures = check_mutation(number, originals, work, endpoint)
        except Exception:  # anything but a TokenportError escaped a read path
            failures = [f"mutation {number}: {traceback.format_exc(limit=4)}"]
        for failure in failures:
            print("FAIL " + failure.replace("\n", " | "), flush=True)
        print(f"DONE {number}", flush=True)


# -- the test --------------------------------------------------------------------------------------------


def test_corrupt_stores_give_the_right_data_or_a_tokenport_error(tmp_path, s3):
    make_stores(str(tmp_path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    step = -(-MUTATIONS // WORKERS)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(tmp_path), str(first), str(min(first + step, MUTATIONS)), s3.endpoint_url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for first in range(0, MUTATIONS, step)
    ]
    problems, done = [], 0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        lines = out.splitlines()
        done += sum(line.startswith("DONE") for line in lines)
        problems += [line for line in lines if line.startswith("FAIL")]
        if proc.returncode != 0:
            started = [line for line in lines if line.startswith("START")]
            problems.append(
                f"worker died with code {proc.returncode} in {started[-1] if started else '?'}: {err[-2000:]}"
            )
    assert not problems, "\n".join(problems[:20])
    assert done == MUTATIONS


if __name__ == "__main__":
    worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
