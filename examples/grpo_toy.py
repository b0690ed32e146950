"""A toy GRPO run through tokenport's experience dock: a tiny policy learns small sums on CPU in a second.

    python examples/grpo_toy.py --mode async --steps 40
    python examples/grpo_toy.py --mode sync --seed 1
    python examples/grpo_toy.py --mode async --ray-shards 2     # Ray actors around a RayDock (starts a local Ray)

A prompt is two digits; the policy answers one; the reward is 1 for ``(a + b) % 10``. Rollout, reward,
reference and training stages meet in a ``Dock`` (``tokenport.demo.grpo``): ``--mode sync`` runs them in
turn, ``--mode async`` in their own threads with the rollout one step ahead on the policy one version
behind (``max_staleness=1``, admission control). Both are deterministic for a seed. ``--ray-shards K`` runs
the rollout and scoring stages as Ray actors around a ``RayDock`` of K shards, with the same results bit for
bit. Needs torch (and ray for ``--ray-shards``).
"""

from __future__ import annotations

import argparse
import sys

from tokenport.demo.grpo import GRPOConfig, run_grpo
from tokenport.errors import TokenportError


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run, print the mean reward per step and the policy version each step trained on."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("sync", "async"), default="async")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ray-shards", type=int, default=None, help="run on a local Ray with a RayDock of K shards")
    args = parser.parse_args(argv)
    if args.ray_shards is not None:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run = run_grpo(GRPOConfig(steps=args.steps, seed=args.seed), args.mode, ray_shards=args.ray_shards)
    except TokenportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for step, (reward, version) in enumerate(zip(run.rewards, run.versions)):
        print(f"step {step + 1:>3}  mean reward {reward:.3f}  (rollouts of policy version {version})")
    first, last = sum(run.rewards[:5]) / 5, sum(run.rewards[-5:]) / 5
    print(f"mean reward of the first 5 steps {first:.3f}, of the last 5 {last:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
