"""Policies of the LLM serving workload: deployment, routing and batching."""
