"""Training-jobs domain: preemptible FSDP jobs on granted GPU gangs (harvesting).

- ``workload``: the ``training-jobs`` kind: jobs, gangs, restore and checkpoint costs.
"""
