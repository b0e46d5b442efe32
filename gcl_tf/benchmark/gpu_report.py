"""The GPU check's conclusions: the failed assertions, and the ``jit_compile`` verdict the speed
rows support against the one ``train.jit_compile: auto`` makes (gpu_check.md is written by the
method's speed checks, gcl_tf/speed/)."""
from __future__ import annotations

import numpy as np

from gcl_tf.benchmark.gpu_speed import POLICY_NAMES, variant_name


def failures(report) -> list[str]:
    out = []
    for where in ("placement", "end_to_end"):
        r = report[where]
        label = "single device" if where == "placement" else "mirrored run"
        if r["misplaced"]:
            out.append(f"{label}: {len(r['misplaced'])} variables off the device (first: {r['misplaced'][0]})")
        if not r["memory_variables"]:
            out.append(f"{label}: no memory variable found to check")
        if r["variable_contents_to_host"]:
            out.append(f"{label}: the step copies variable contents to the host "
                       f"({r['variable_contents_to_host'][0]})")
        on_device = r["random_ops_on_device"] or (r["jit_compile"] and r["xla_computations_on_device"])
        if r["random_ops_on_host"] or not on_device:
            first = r["random_ops_on_host"][:1] or "no random op"
            out.append(f"{label}: graph noise not drawn on the device ({first})")
        if r["traces"] != 1:
            out.append(f"{label}: the step traced {r['traces']} times")
        if r["functions"] == 0:
            out.append(f"{label}: no compiled function was observed")
    if not np.isfinite(report["end_to_end"]["acc"]):
        out.append("mirrored run: accuracy is not finite")
    for row in report["rows"]:
        retraced = {n: t for n, t in row["traces"].items() if t is not None and t != 1}
        if retraced:
            out.append(f"{row['what']}: retraced ({retraced})")
    return out


def verdict(rows, device_kind: str) -> dict:
    """Which jit_compile choice the rows support (XLA against no XLA, per precision measured),
    against the table ``auto`` uses on this device type."""
    from gcl_tf.devices import JIT_COMPILE_BY_DEVICE

    comparisons = []
    for row in rows:
        for policy in POLICY_NAMES:
            off, on = row["ms"].get(variant_name(policy, False)), row["ms"].get(variant_name(policy, True))
            if off is not None and on is not None:
                comparisons.append({"row": row["what"], "precision": POLICY_NAMES[policy], "xla_over_plain": on / off})
    float32 = [c for c in comparisons if c["precision"] == "float32"]
    steps = [c for c in float32 if "step" in c["row"]]
    evaluations = [c for c in float32 if "evaluation" in c["row"]]
    if not steps:
        return {"comparisons": comparisons, "supported": None, "auto": JIT_COMPILE_BY_DEVICE.get(device_kind),
                "text": "no float32 XLA variant measured: nothing to decide jit_compile on"}
    # Keras compiles the evaluation with the training step's jit_compile: both must gain.
    wins = sum(c["xla_over_plain"] < 1.0 for c in steps)
    evaluation_wins = all(c["xla_over_plain"] < 1.0 for c in evaluations)
    supported = wins * 2 > len(steps) and evaluation_wins
    auto = JIT_COMPILE_BY_DEVICE.get(device_kind, False)
    agrees = "confirms" if supported == auto else "overturns"
    evaluation_text = "".join(f", and {'faster' if c['xla_over_plain'] < 1.0 else 'slower'} on the evaluation "
                              f"({c['xla_over_plain']:.2f}x; Keras compiles it with the same setting)"
                              for c in evaluations)
    text = (f"XLA is faster on {wins} of {len(steps)} float32 training-step rows{evaluation_text}: the numbers "
            f"support jit_compile {'on' if supported else 'off'} on {device_kind}; train.jit_compile: auto picks "
            f"{'on' if auto else 'off'} there (gcl_tf/devices.py JIT_COMPILE_BY_DEVICE): this run {agrees} it")
    if supported != auto:
        text += f" (set JIT_COMPILE_BY_DEVICE[{device_kind!r}] = {supported})"
    return {"comparisons": comparisons, "supported": supported, "auto": auto, "agrees": supported == auto, "text": text}
