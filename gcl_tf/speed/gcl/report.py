"""The GPU check's report, gpu_check.md: the speed rows under each variant, the PyTorch anchor's
rows as ratios, the placement of both runs, the ``jit_compile`` verdict and the failed assertions
(gcl_tf/benchmark/gpu_report.py draws the conclusions)."""
from __future__ import annotations

from gcl_tf.benchmark.gpu_speed import variant_name


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
        lines += [f"Plain PyTorch {anchors['torch']['version']} (gcl_tf/speed/gcl/anchors/torch_gcl_step.py), "
                  "run right after, on the same device; ours / torch (below 1: ours is faster):", "",
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
