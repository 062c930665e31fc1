"""Run operations: the CLI, callbacks, checkpoints, tracking, fine-tuning and plots."""
