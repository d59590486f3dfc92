"""Policies of the ``arbiter`` decision point: which workload of a multi-workload
scenario holds which GPUs over time (simulator.colocate, docs/colocate.md)."""
