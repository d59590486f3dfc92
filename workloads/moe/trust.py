"""How far to trust a MoE run's times (the fields of :mod:`workloads.models.trust`).

The GPU's band is its kernel fits' residuals (``devices/kernels.yaml``) weighted by the
kernel classes' shares of one decode token through one layer with every expert on the GPU
(:meth:`MoeCosts.gpu_class_seconds`); the CPU's work is priced by the CPU model
(``devices/cpu_kernels.yaml``: reconstructions, or the host roofline), which has no fit
residuals, so its share carries :data:`devices.kernels.UNCALIBRATED_RESIDUAL`. The run's
band weights the two by the GPU's and the CPU's busy time. PCIe copies are priced by the
link model (measured copy rates) and carry no kernel residual. A lower bound on the
end-to-end error, which ``docs/fidelity/report.md`` measures per group (offload rows).
"""

from __future__ import annotations

from typing import Any

from hetsim.devices.kernels import KERNEL_CLASSES, UNCALIBRATED_RESIDUAL, residual_band

_ORDER = ("calibrated", "borrowed", "uncalibrated")


def moe_trust(
    costs: Any, context: int, experts_per_token: float, gpu_busy_s: float, cpu_busy_s: float
) -> dict[str, float | str]:
    """``model_error_p50/p90``, ``model_fits``, ``kernel_classes``, ``borrowed_fits``."""
    ref = costs.fits
    shares = costs.gpu_class_seconds(context, experts_per_token)
    g50, g90 = residual_band(ref, shares)
    busy = gpu_busy_s + cpu_busy_s
    w_cpu = cpu_busy_s / busy if busy > 0 else 0.0
    p50 = (1.0 - w_cpu) * g50 + w_cpu * UNCALIBRATED_RESIDUAL[0]
    p90 = (1.0 - w_cpu) * g90 + w_cpu * UNCALIBRATED_RESIDUAL[1]
    used = sorted(c for c, t in shares.items() if c in KERNEL_CLASSES and t > 0)
    kind = ref.kind if cpu_busy_s <= 0 else "uncalibrated"
    borrowed = [
        f"{ref.device}.{c}<-{ref.fitted_on.get(c) or 'roofline'}"
        for c in used
        if ref.class_kind(c) != "calibrated"
    ]
    formats = {p.gemm_precision().math_dtype()
               for p in (costs.expert_precision, costs.dense_precision)}  # fmt: skip
    borrowed += ref.borrowed_extras(tuple(sorted(formats)))
    if cpu_busy_s > 0:
        used.append("cpu")
    return {
        "model_error_p50": round(p50, 4),
        "model_error_p90": round(p90, 4),
        "model_fits": max(kind, ref.kind, key=_ORDER.index),
        "kernel_classes": ";".join(used),
        "borrowed_fits": ";".join(borrowed),
    }
