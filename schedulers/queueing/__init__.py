"""Policies of the generic queueing workload (decision point ``queueing.dispatch``)."""
