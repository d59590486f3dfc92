"""Policies of the TEE domain: protection scheme (``tee.protection``) and TEE+NNA
execution (``tee.execution``), one module per policy."""
