"""Adapters to trainers: torch, the HF Trainer and Megatron-LM (``tokenport.integrations.megatron``)."""
