"""gcl_tf's GCL training step against the plain PyTorch eager step of the same shapes, taken in turns.

The PyTorch step is ``anchors/torch_gcl_step.py`` beside this module (the shared anchor: the
paper's math written plainly); ours is the compiled ``train_step`` the throughput benchmark times,
after the memory is full. Each measurement runs in a fresh process (TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` once, at
import), and the processes alternate round by round: ours with oneDNN off, ours with it on, PyTorch,
then again, so that a shared machine's drift falls on all three alike. Reported per regime: the
median ms of each, and the median over rounds of each round's ratio ours / PyTorch (below 1: ours
is faster).

    python -m gcl_tf.benchmark throughput --sections torch [--torch-rounds 5]
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np

from gcl_tf.benchmark.gpu_devices import torch_probe
from gcl_tf.benchmark.timing import cpu_model
from gcl_tf.speed.gcl.anchor import run_anchor

#: regime -> (input shape, memory, trunk): the anchor's two regimes.
REGIMES = {"mnist": ((28, 28, 1), 1000, "mlp"), "cifar": ((32, 32, 3), 250, "convnet")}
#: our variants: TF_ENABLE_ONEDNN_OPTS for the child process.
OURS = {"gcl_tf, oneDNN off": "0", "gcl_tf, oneDNN on": "1"}
STEPS = {"mnist": 30, "cifar": 8}  # timed steps per process, after warm-up (medians)
TORCH = "PyTorch eager"


def child(regime: str, steps: int) -> None:
    """In a fresh process: time our compiled GCL step and print one line."""
    from gcl_tf.quiet import import_tensorflow, onednn_enabled

    import_tensorflow()
    from gcl_tf.benchmark.timing import median_seconds
    from gcl_tf.benchmark.workloads import prepare_train_step
    from gcl_tf.speed import make_model

    shape, memory, backbone = REGIMES[regime]
    model = make_model("gcl", shape, memory=memory, backbone=backbone)
    one, traces = prepare_train_step(model, shape)
    seconds = median_seconds(one, steps, warmup=3)
    print(f"gcl_tf regime={regime} onednn={onednn_enabled()} traces={len(traces)} "
          f"median_ms_per_step={1e3 * seconds:.1f}", flush=True)


def ours(regime: str, onednn: str, steps: int, timeout: int = 1800) -> dict:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="2")
    args = [sys.executable, "-m", __name__, regime, str(steps)]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    line = next((text for text in proc.stdout.splitlines() if text.startswith("gcl_tf ")), None)
    if proc.returncode != 0 or line is None:
        return {"error": ((proc.stderr.strip().splitlines() or ["no output"])[-1])[:300]}
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    return {"ms": float(fields["median_ms_per_step"]), "onednn": fields["onednn"] == "True", "line": line}


def section(rounds: int, log, regimes=("mnist", "cifar"), steps=None) -> dict:
    """``rounds`` rounds of (ours per OURS variant, PyTorch) per regime, each in its own process."""
    info, note = torch_probe("CPU")
    if info is None:
        log(f"  {note}")
        return {"note": note, "rows": []}
    steps = dict(STEPS, **(steps or {}))
    rows = []
    for regime in regimes:
        times = {name: [] for name in [*OURS, TORCH]}
        for round_ in range(rounds):
            for name, onednn in OURS.items():
                result = ours(regime, onednn, steps[regime])
                if "error" in result:
                    raise RuntimeError(f"{name} ({regime}): {result['error']}")
                times[name].append(result["ms"])
            result = run_anchor(regime, "step", "eager", "CPU", steps[regime], timeout=1800)
            if "error" in result:
                raise RuntimeError(f"{TORCH} ({regime}): {result['error']}")
            times[TORCH].append(result["ms"])
            last = ", ".join(f"{name} {values[-1]:.1f} ms" for name, values in times.items())
            log(f"  {regime} round {round_ + 1}/{rounds}: {last}")
        rows.append(summarize(regime, times))
    return {"note": "", "torch": info, "cpu": cpu_model(), "rows": rows}


def summarize(regime: str, times: dict) -> dict:
    """Medians of each variant's ms and of each round's ratio ours / PyTorch (with their range)."""
    torch_ms = np.array(times[TORCH])
    ratios = {name: np.array(times[name]) / torch_ms for name in OURS}
    return {
        "regime": regime, "memory": REGIMES[regime][1], "trunk": REGIMES[regime][2], "rounds": len(torch_ms),
        "ms": {name: float(np.median(values)) for name, values in times.items()},
        "ratio_to_torch": {name: float(np.median(r)) for name, r in ratios.items()},
        "ratio_range": {name: [float(np.min(r)), float(np.max(r))] for name, r in ratios.items()},
        "times": times,
    }


def markdown(report: dict) -> list[str]:
    if not report["rows"]:
        return ["", f"Against PyTorch: {report['note']}"]
    cpu = report.get("cpu", {})
    lines = ["", f"Against PyTorch {report['torch']['version']} eager, each in a fresh process, in turns "
             f"({report['rows'][0]['rounds']} rounds); CPU: {cpu.get('model', '?')}, "
             f"{' '.join(cpu.get('vector_flags', [])) or 'no AVX'}.", "",
             "| step | " + " | ".join(f"{n} ms" for n in [*OURS, TORCH]) + " | "
             + " | ".join(f"{n} / PyTorch" for n in OURS) + " |",
             "|---|" + "---|" * (len(OURS) * 2 + 1)]
    for r in report["rows"]:
        lines.append(f"| GCL step, {r['trunk']}, memory {r['memory']} | "
                     + " | ".join(f"{r['ms'][n]:.1f}" for n in [*OURS, TORCH]) + " | "
                     + " | ".join(f"{r['ratio_to_torch'][n]:.2f}x ({r['ratio_range'][n][0]:.2f}-"
                                  f"{r['ratio_range'][n][1]:.2f})" for n in OURS) + " |")
    return lines


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]))
