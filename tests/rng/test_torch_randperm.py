"""The numba twin of torch.randperm: same permutation, same generator state afterwards."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tokenport.rng import torch_randperm  # noqa: E402


def generator_pair(seed: int, warm_up: int) -> tuple:
    """Two generators in the same state, advanced ``warm_up`` draws into a block."""
    ours, theirs = torch.Generator(), torch.Generator()
    for generator in (ours, theirs):
        generator.manual_seed(seed)
        if warm_up:
            torch.randperm(warm_up + 1, generator=generator)
    return ours, theirs


@pytest.mark.parametrize("n", [0, 1, 2, 3, 623, 624, 625, 626, 1247, 1249, 4097, 10_007, 200_003])
@pytest.mark.parametrize("warm_up", [0, 5, 622, 623])
def test_twin_equals_torch_and_leaves_the_same_state(n: int, warm_up: int) -> None:
    ours, theirs = generator_pair(seed=n + warm_up, warm_up=warm_up)
    assert np.array_equal(torch_randperm.randperm(n, ours), torch.randperm(n, generator=theirs).numpy())
    assert torch.equal(ours.get_state(), theirs.get_state())
    # Later draws of every kind continue identically.
    assert torch.equal(torch.randperm(999, generator=ours), torch.randperm(999, generator=theirs))
    assert torch.equal(torch.rand(7, generator=ours), torch.rand(7, generator=theirs))


def test_consecutive_draws_follow_torch() -> None:
    ours, theirs = generator_pair(seed=3, warm_up=0)
    for n in (10, 5000, 1, 77, 3000):
        assert np.array_equal(torch_randperm.randperm(n, ours), torch.randperm(n, generator=theirs).numpy())


def test_default_generator_is_torch_global_rng() -> None:
    torch.manual_seed(21)
    ours = torch_randperm.randperm(3000)
    after_ours = torch.rand(3)
    torch.manual_seed(21)
    theirs = torch.randperm(3000).numpy()
    assert np.array_equal(ours, theirs)
    assert torch.equal(after_ours, torch.rand(3))


def test_normal_cache_in_the_state_is_kept() -> None:
    ours, theirs = generator_pair(seed=8, warm_up=10)
    for generator in (ours, theirs):
        torch.randn(1, generator=generator)  # leaves a cached second normal sample in the state
    torch_randperm.randperm(1000, ours)
    torch.randperm(1000, generator=theirs)
    assert torch.equal(ours.get_state(), theirs.get_state())
    assert torch.equal(torch.randn(3, generator=ours), torch.randn(3, generator=theirs))


def test_large_sizes_and_a_failed_check_fall_back_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = torch.randperm

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "randperm", counting)
    monkeypatch.setattr(torch_randperm, "_LARGE", 100)  # torch's 64-bit path starts at 2**32 // 20
    ours, theirs = generator_pair(seed=1, warm_up=0)
    assert np.array_equal(torch_randperm.randperm(500, ours), real(500, generator=theirs).numpy())
    assert calls == [(500,)]
    monkeypatch.setattr(torch_randperm, "_LARGE", 2**32 // 20)
    monkeypatch.setattr(torch_randperm, "_twin_checked", False)  # as if the installed torch had changed
    calls.clear()
    assert np.array_equal(torch_randperm.randperm(500, ours), real(500, generator=theirs).numpy())
    assert calls == [(500,)]


def test_the_self_check_passes_on_the_installed_torch() -> None:
    assert torch_randperm._twin_matches_torch(torch)
