"""Finetuning on Ray Train: the batch format, the losses, and (in later modules) the trainer."""
