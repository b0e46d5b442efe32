"""The GPU check's PyTorch anchor: the plain PyTorch GCL step and evaluation of the same shapes
(anchors/torch_gcl_step.py, run in a subprocess, eager and under torch.compile) when torch is
importable, and the speed rows as ratios to it."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from gcl_tf.benchmark.gpu_devices import torch_probe
from gcl_tf.benchmark.gpu_speed import variant_name

ANCHOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "anchors", "torch_gcl_step.py")


def run_anchor(regime: str, what: str, mode: str, device_kind: str, steps: int, timeout: int) -> dict:
    device = "cuda" if device_kind == "GPU" else "cpu"
    args = [sys.executable, ANCHOR, regime, str(steps), device, mode, what]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    line = next((text for text in proc.stdout.splitlines() if text.startswith("torch ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail[:300]}
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    ms = float(fields["median_ms_per_image"] if what == "eval" else fields["median_ms_per_step"])
    return {"ms": ms, "line": line, "command": " ".join(["python"] + args[1:])}


def anchor_section(devices, rows, quick, log):
    info, note = torch_probe(devices.kind)
    if info is None:
        log(f"  {note}")
        return {"note": note, "runs": {}}
    modes = ("eager",) if quick else ("eager", "compile")
    runs = {}
    for row in rows:
        if not row["anchor"] or (quick and row["anchor"] != ("mnist", "step")):  # quick: the wiring only
            continue
        regime, what = row["anchor"]
        for mode in modes if what == "step" else modes[:1]:  # the evaluation: eager (a compile of 30 unrolled samples)
            steps = 3 if quick else (10 if what == "eval" else 50)
            result = run_anchor(regime, what, mode, devices.kind, steps, timeout=120 if quick else 300)
            runs[f"{row['key']}/{mode}"] = result
            ours = row["ms"][variant_name("float32", False)]
            if "ms" in result:
                result["ratios"] = {name: value / result["ms"] for name, value in row["ms"].items()}
                log(f"  torch {mode} {regime} {what}: {result['ms']:.3g} {row['unit']} (ours float32 / torch: "
                    f"{ours / result['ms']:.2f})")
            else:
                log(f"  torch {mode} {regime} {what}: failed ({result['error']})")
    note = "" if not quick else "quick: our rows use smaller memories than the anchor's, the ratios compare nothing"
    return {"note": note, "torch": info, "runs": runs}
