"""Policies of the observability domain: detectors, mitigation and checkpoint intervals."""
