"""Policies of the generic queueing workload (decision point ``queueing.dispatch``)."""

from schedulers.queueing import fifo, least_loaded, random_dispatch, round_robin

__all__ = ["fifo", "least_loaded", "random_dispatch", "round_robin"]
