"""The GPU check's conclusions and report: the failed assertions, the ``jit_compile`` verdict
the speed rows support against the one ``train.jit_compile: auto`` makes, and gpu_check.md."""
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


def markdown(report) -> str:
    env = report["environment"]
    gpus = ", ".join(f"{g['name']} (compute {'.'.join(map(str, g['compute_capability']))})" for g in env["gpus"])
    lines = ["# GPU check", "", f"Command: `{report['command']}`", "",
             f"TensorFlow {env['tensorflow']}, Keras {env['keras']}; devices under test: {env['device_kind']} "
             f"({env['single_device']}; replicas {', '.join(env['replica_devices'])})" + (f"; {gpus}" if gpus else ""),
             f"Total {report['seconds']:.0f} s. Every figure of a row was timed in turns with the others "
             f"of its row in this process (medians); ratios are to float32 without XLA.", ""]
    names = [variant_name(p, x) for p, x in report["variants"]]
    lines += ["| row | unit | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for row in report["rows"]:
        cells = [f"{row['ms'][n]:.3g} ({row['ratio_to_float32'][n]:.2f}x)" for n in names]
        lines.append(f"| {row['what']} | {row['unit']} | " + " | ".join(cells) + " |")
    anchors = report["anchor"]
    lines.append("")
    if anchors.get("runs"):
        lines += [f"Plain PyTorch {anchors['torch']['version']} (gcl_tf/benchmark/anchors/torch_gcl_step.py), run "
                  "right after, on the same device; ours / torch (below 1: ours is faster):", "",
                  "| row | torch | torch time | " + " | ".join(f"ours {n} / torch" for n in names) + " |",
                  "|---|---|---|" + "---|" * len(names)]
        for row in report["rows"]:
            for mode in ("eager", "compile"):
                run = anchors["runs"].get(f"{row['key']}/{mode}")
                if run is None:
                    continue
                if "ms" not in run:
                    lines.append(f"| {row['what']} | {mode} | failed: {run['error']} |" + " |" * len(names))
                    continue
                lines.append(f"| {row['what']} | {mode} | {run['ms']:.3g} {row['unit']} | "
                             + " | ".join(f"{run['ratios'][n]:.3g}" for n in names) + " |")
        if anchors.get("note"):
            lines += ["", anchors["note"]]
    else:
        lines.append(anchors["note"])
    lines += ["", "## Placement", ""]
    for where, label in (("placement", f"GCL on {env['single_device']}"),
                         ("end_to_end", "continual run under MirroredStrategy")):
        r = report[where]
        lines.append(f"- {label}: {r['variables']} variables (memory: {len(r['memory_variables'])}, evaluation caches: "
                     f"{len(r['cache_variables'])}), {len(r['misplaced'])} off their device; the compiled step "
                     f"({r['functions']} function(s), {r['nodes']} placed nodes, read without XLA): "
                     f"{len(r['device_to_host_sends'])} device-to-host sends, "
                     f"{len(r['variable_contents_to_host'])} of variable contents; {r['random_ops_on_device']} "
                     f"random ops on the device, {len(r['random_ops_on_host'])} on the host, "
                     f"{r['xla_computations_on_device']} XLA computations on the device; traces {r['traces']}")
    e2e = report["end_to_end"]
    lines += [f"- the run: Split CIFAR-10-shaped (generated), GCL ({e2e['backbone']}), memory {e2e['memory']}, batch "
              f"{e2e['batch_size']} over {e2e['replicas']} replica(s), jit_compile {e2e['run_jit_compile']} (auto): "
              f"ACC {e2e['acc']:.1f}, {e2e['train_steps']} "
              f"steps, train {e2e['train_seconds']:.1f} s, eval {e2e['eval_seconds']:.1f} s", "",
              "## jit_compile", "", report["verdict"]["text"], ""]
    for c in report["verdict"]["comparisons"]:
        lines.append(f"- {c['row']}, {c['precision']}: XLA / plain {c['xla_over_plain']:.2f}")
    lines += ["", "## Result", ""]
    lines += ([f"- FAILED: {f}" for f in report["failures"]] or ["All placement assertions hold."])
    return "\n".join(lines) + "\n"
