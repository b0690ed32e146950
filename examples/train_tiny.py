"""Train a tiny decoder-only model on CPU through tokenport, on 2 ranks, and resume it exactly.

    python examples/train_tiny.py --workdir tiny-run --steps 40 --ranks 2 --checkpoint-every 10
    python examples/train_tiny.py --workdir tiny-run --steps 60 --ranks 1 --resume

The first run makes the demo's code and prose stores from the Python standard library under
``WORKDIR/stores`` (once), blends them 30/70 into GPT samples of 64 tokens and trains on
``--ranks`` processes over ``torch.distributed`` (gloo), checkpointing every
``--checkpoint-every`` steps to ``WORKDIR/run/step-NNNNNN.pt``. ``--resume`` continues from the
newest checkpoint, on any rank count dividing the global batch (8): kill a run at any point and
resume it, and ``WORKDIR/run/log.json`` (per step: the loss as a float hex, the global sample
ids, a digest of the batch's tokens) is the one an uninterrupted run writes. Needs torch.
"""

from __future__ import annotations

import argparse
import os
import sys

from tokenport.demo.train import TrainConfig, launch, prepare_training_stores
from tokenport.errors import TokenportError


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, prepare the stores if needed, train; print the loss curve's ends."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="stores go to WORKDIR/stores, the run to WORKDIR/run")
    parser.add_argument("--steps", type=int, default=40, help="train until this step (default 40)")
    parser.add_argument("--ranks", type=int, default=2, help="data-parallel processes (default 2)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints (default 10)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    args = parser.parse_args(argv)
    try:
        spec = prepare_training_stores(args.workdir)
        config = TrainConfig(steps=args.steps, checkpoint_every=args.checkpoint_every)
        log = launch(spec, os.path.join(args.workdir, "run"), config, ranks=args.ranks, resume=args.resume)
    except TokenportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    losses = log.losses
    print(f"{len(losses)} steps on {args.ranks} rank(s): loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
