"""How far to trust a run's times: the cost model's error band for the transformer
configs it priced, the fits it used, and the kernel classes it priced with.

For every (GPU type, TP) config, the kernel classes' shares of GPU time over its
representative iterations (one mean-length prompt alone; for runs that decode, also a
decode step of 16 sequences at the mean context) weight the per-class fit residuals of
``devices/kernels.yaml``
(:meth:`TransformerCost.error_band`); the run reports the widest band over its configs
and the least trusted fit kind. These are residuals of the kernel fits on their own
measurements, so they are a lower bound on the end-to-end error, which
``docs/fidelity/report.md`` measures against published results per group.
"""

from __future__ import annotations

from collections.abc import Iterable

from hetsim.workloads.models.transformer_cost import (
    Batch,
    TransformerCost,
    decode_batch,
    prefill_batch,
)

#: Decode batch of the representative decode iteration.
REPRESENTATIVE_DECODE_BATCH = 16
_ORDER = ("calibrated", "borrowed", "uncalibrated")


def model_trust(
    costs: Iterable[TransformerCost], mean_prompt: float, mean_output: float
) -> dict[str, float | str]:
    """``model_error_p50``, ``model_error_p90``, ``model_fits``, ``kernel_classes`` and
    ``borrowed_fits`` of a run priced with ``costs`` (``mean_output`` 0: prefill only)."""
    p50 = p90 = 0.0
    kind = "calibrated"
    classes: set[str] = set()
    borrowed: set[str] = set()
    prompt = max(round(mean_prompt), 1)
    ctx = mean_prompt + mean_output / 2.0
    for tc in {(c.spec.name, c.tp): c for c in costs}.values():
        batches: tuple[Batch, ...] = (prefill_batch(prompt),)
        if mean_output > 0:
            batches += (decode_batch(REPRESENTATIVE_DECODE_BATCH, ctx),)
        a, b, k = tc.error_band(batches)
        p50, p90 = max(p50, a), max(p90, b)
        kind = max(kind, k, key=_ORDER.index)
        classes.update(tc.kernel_classes())
        for cls in ("gemm", "elementwise", "attention_prefill", "attention_decode"):
            if tc.fits.class_kind(cls) != "calibrated":
                origin = tc.fits.fitted_on.get(cls) or "roofline"
                borrowed.add(f"{tc.spec.name}.{cls}<-{origin}")
        borrowed.update(tc.fits.borrowed_extras((tc.precision.gemm_precision().math_dtype(),)))
    return {
        "model_error_p50": round(p50, 4),
        "model_error_p90": round(p90, 4),
        "model_fits": kind,
        "kernel_classes": ";".join(sorted(classes)),
        "borrowed_fits": ";".join(sorted(borrowed)),
    }
