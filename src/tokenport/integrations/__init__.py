"""Adapters from tokenport datasets and samplers to trainers: HF Trainer (``integrations.hf``)."""
