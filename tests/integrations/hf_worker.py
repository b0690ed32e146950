"""One rank of a TokenportTrainer run, for test_hf_trainer_ranks.py (started by torchrun or directly).

Arguments: STORE OUTPUT_DIR RESULT_PREFIX PER_DEVICE_BATCH MAX_STEPS RESUME ('-' for none). Writes
RESULT_PREFIX.RANK.json with the sample ids this rank read and, on rank 0, the losses by step.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
import transformers

import tokenport as tp
from tokenport.integrations.hf import TokenportTrainer


class Recorder(torch.utils.data.Dataset):
    """Records every sample id read."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int):
        self.read.append(int(idx))
        return self.dataset[idx]


def main(store: str, output_dir: str, result: str, batch: str, max_steps: str, resume: str) -> None:
    torch.set_num_threads(1)
    prefix = tp.IndexedDataset(store)
    data = Recorder(tp.GPTDataset(prefix, np.arange(len(prefix)), 16, tp.GPTSampleConfig(32, eod_id=2), seed=1))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    args = transformers.TrainingArguments(
        output_dir,
        per_device_train_batch_size=int(batch),
        max_steps=int(max_steps),
        save_steps=2,
        logging_steps=1,
        learning_rate=1e-2,
        report_to=[],
        use_cpu=True,
        seed=7,
        disable_tqdm=True,
        dataloader_pin_memory=False,
    )
    trainer = TokenportTrainer(model=transformers.LlamaForCausalLM(config), args=args, train_dataset=data)
    trainer.train(resume_from_checkpoint=None if resume == "-" else resume)
    losses = {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}
    with open(f"{result}.{args.process_index}.json", "w", encoding="utf-8") as file:
        json.dump({"read": data.read, "world_size": args.world_size, "losses": losses}, file)
    if torch.distributed.is_initialized():  # leave together: a rank exiting while its peer's gloo
        torch.distributed.barrier()  # connection is open can abort that peer (SIGABRT under load)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
