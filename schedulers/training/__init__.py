"""Policies of the training domain: what to swap or recompute (``training.swap``) and the
pipeline schedule (``training.schedule``), one module per policy."""
