"""Policies of the cluster domain: ordering, packing and allocation (one file each)."""
