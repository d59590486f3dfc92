"""Policies of the elastic online-training workload: forecaster, autoscaler, balance."""
