"""Units and axis labels of metrics and swept parameters, read off their names.

Names carry their unit as a suffix (``ttft_p99_s``, ``kv_transfer_bytes``,
``goodput_tokens_per_usd``); :data:`SUFFIX_UNITS` maps each suffix to the unit shown on
an axis, longest suffix first, and :data:`LABELS` gives the words for names the generic
rule would spell badly. Every plot labels its axes through :func:`axis_label`, so a
figure never shows a raw column name without its unit.
"""

from __future__ import annotations

from dataclasses import dataclass

SUFFIX_UNITS: tuple[tuple[str, str], ...] = (
    ("_tokens_per_usd", "tokens/USD"),
    ("_usd_per_million_tokens", "USD per 1M tokens"),
    ("_tokens_per_s", "tokens/s"),
    ("_samples_per_s", "samples/s"),
    ("_rate_per_s", "1/s"),
    ("_per_hour", "USD/h"),
    ("_per_s", "1/s"),
    ("_per_J", "1/J"),
    ("_W", "W"),
    ("_J", "J"),
    ("_rps", "req/s"),
    ("_GBps", "GB/s"),
    ("_Bps", "B/s"),
    ("_bytes", "B"),
    ("_usd", "USD"),
    ("_gib", "GiB"),
    ("_h", "h"),
    ("_s", "s"),
)
"""Name suffix -> unit, tried in order (longest, most specific first)."""

FRACTION_WORDS = ("utilisation", "attainment", "hit_rate", "frac", "share", "precision",
                  "recall", "f1", "accuracy", "violation_rate", "p_wait", "dsr", "ettr",
                  "mfu", "wape", "bubble", "consumed_fraction")  # fmt: skip
"""A name containing one of these is a fraction in [0, 1] (unit ``fraction``)."""

ACRONYMS = {"ttft": "TTFT", "tpot": "TPOT", "tbt": "TBT", "e2e": "E2E", "jct": "JCT",
            "slo": "SLO", "kv": "KV", "gpu": "GPU", "cpu": "CPU", "dsr": "DSR",
            "mfu": "MFU", "ettr": "ETTR", "h2d": "H2D", "d2h": "D2H", "pcie": "PCIe",
            "usd": "USD", "rps": "req/s", "hbm": "HBM", "tee": "TEE", "nna": "NNA",
            "mtbf": "MTBF", "wape": "WAPE", "f1": "F1", "p2p": "P2P"}  # fmt: skip

LABELS: dict[str, str] = {
    "workload.arrivals.rate_per_s": "arrival rate",
    "p_wait": "P(wait)",
    "throughput_per_s": "throughput",
    "slo_attainment": "SLO attainment",
    "goodput_rps": "goodput",
    "dsr": "deadline satisfactory ratio",
    "usd_per_hour": "price",
    "tokens_per_s": "throughput",
    "throughput_tokens_per_s": "throughput",
    "decode_tokens_per_s": "decode throughput",
    "prefill_tokens_per_s": "prefill throughput",
    "output_tokens_per_s": "output throughput",
    "goodput_tokens_per_s": "goodput",
    "busbw_Bps": "bus bandwidth",
    "algbw_Bps": "algorithm bandwidth",
}
"""Words for names the generic rule would spell badly (the unit is still appended)."""


@dataclass(frozen=True)
class MetricInfo:
    """How a metric or swept parameter is shown: its words and its unit ('' if none)."""

    name: str
    label: str
    unit: str

    @property
    def axis_label(self) -> str:
        """``label (unit)``, or the label alone for a count or a category."""
        return f"{self.label} ({self.unit})" if self.unit else self.label


def _words(stem: str) -> str:
    return " ".join(ACRONYMS.get(w, w) for w in stem.split("_") if w)


def metric_info(name: str) -> MetricInfo:
    """Label and unit of a metric column or a dotted parameter path."""
    leaf = name.rsplit(".", 1)[-1]
    unit, stem = "", leaf
    for suffix, u in SUFFIX_UNITS:
        if leaf.endswith(suffix) and len(leaf) > len(suffix):
            unit, stem = u, leaf[: -len(suffix)]
            break
    else:
        if any(w in leaf for w in FRACTION_WORDS):
            unit = "fraction"
    if name in LABELS:
        return MetricInfo(name, LABELS[name], unit)
    if leaf in LABELS:
        return MetricInfo(name, LABELS[leaf], unit)
    parts = name.split(".")
    if parts[0] == "policies" and len(parts) == 2:
        return MetricInfo(name, f"{_words(leaf)} policy", unit)
    label = _words(stem)
    if len(parts) > 1 and stem in ("rate", "count", "value", "kind", "name", "mean", "size"):
        label = f"{_words(parts[-2])} {label}"  # 'rate' alone says too little
    return MetricInfo(name, label, unit)


def axis_label(name: str) -> str:
    """The axis label of a metric or parameter: words and unit."""
    return metric_info(name).axis_label
