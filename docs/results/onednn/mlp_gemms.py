"""The GEMMs of one GCL MLP training step (issue 36's "mnist" regime: memory 1000, batch 10, 28x28,
hidden 256), timed alone in TensorFlow (oneDNN as gcl_tf sets it) and in PyTorch, each in its own
process, in turns: how much of the step's time its matrix products take, framework by framework.

    python docs/results/onednn/mlp_gemms.py [--rounds 3]

The step multiplies the same matrices in both frameworks (forward and backward; the PyTorch
anchor's aggregation is wider, 2H = 512 columns, where ours aggregates H + K + 1 = 267 and applies
the label encoder after). Each timed call runs 10 products of distinct inputs (one compiled
function in TensorFlow, as in the step; a Python loop in PyTorch, as in its eager step), so a
call's dispatch does not count as GEMM time. Prints per GEMM the median ms in each, then the sums
and the GFLOP.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

M, T, D, H, K = 1000, 10, 784, 256, 10
N = M + T
# (name, (m, k), (k, n), count): C[m, n] = A[m, k] B[k, n]; transposes as the backward passes need
# them are timed as plain products of the same sizes (a measured transpose costs the same here).
GEMMS = [
    ("trunk 1 forward", (N, D), (D, H), 1), ("trunk 1 weight grad", (D, N), (N, H), 1),
    ("trunk 2 / heads forward", (N, H), (H, H), 3), ("trunk 2 / heads weight grad", (H, N), (N, H), 3),
    ("trunk 2 / heads input grad", (N, H), (H, H), 3),
    ("kernel forward", (N, H + 2), (H + 2, M), 1), ("kernel grad rows", (N, M), (M, H + 2), 1),
    ("kernel grad columns", (M, N), (N, H + 2), 1),
    ("aggregation forward", (N, M), (M, H + K + 1), 1), ("aggregation grad graph", (N, H + K + 1), (H + K + 1, M), 1),
    ("aggregation grad values", (M, N), (N, H + K + 1), 1),
]


BATCH = 10  # products per timed call (of distinct inputs): one call's dispatch is spread over them


def child(framework: str, repeats: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = {}
    if framework == "tf":
        from gcl_tf.quiet import import_tensorflow

        tf = import_tensorflow()
        for name, a, b, _ in GEMMS:
            xs, y = [tf.random.normal(a) for _ in range(BATCH)], tf.random.normal(b)
            f = tf.function(lambda xs=xs, y=y: tf.add_n([tf.matmul(x, y)[0, 0] for x in xs]))
            out[name] = timed(lambda: f().numpy(), repeats) / BATCH
    else:
        import torch

        for name, a, b, _ in GEMMS:
            xs, y = [torch.randn(*a) for _ in range(BATCH)], torch.randn(*b)
            out[name] = timed(lambda: float(sum((x @ y)[0, 0] for x in xs)), repeats) / BATCH
    print("GEMMS " + json.dumps(out), flush=True)


def timed(fn, repeats: int) -> float:
    from gcl_tf.benchmark.timing import median_seconds  # numpy only: no TensorFlow in PyTorch's process

    return median_seconds(fn, repeats, warmup=3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--child", choices=["tf", "torch"])
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.repeats)
    runs = {"tf": [], "torch": []}
    for _ in range(args.rounds):
        for framework in runs:
            proc = subprocess.run([sys.executable, __file__, "--child", framework, "--repeats", str(args.repeats)],
                                  capture_output=True, text=True, check=True)
            line = next(text for text in proc.stdout.splitlines() if text.startswith("GEMMS "))
            runs[framework].append(json.loads(line[6:]))
    import numpy as np

    total = {"tf": 0.0, "torch": 0.0}
    flops = 0.0
    print(f"{'GEMM (count)':36s} {'GFLOP':>6s} {'TF ms':>7s} {'PyTorch ms':>10s}")
    for name, a, b, count in GEMMS:
        gflop = 2 * a[0] * a[1] * b[1] * count / 1e9
        flops += gflop
        ms = {fw: 1e3 * count * float(np.median([run[name] for run in runs[fw]])) for fw in runs}
        for fw in runs:
            total[fw] += ms[fw]
        print(f"{name + f' ({count})':36s} {gflop:6.2f} {ms['tf']:7.1f} {ms['torch']:10.1f}")
    print(f"{'all GEMMs of one step':36s} {flops:6.2f} {total['tf']:7.1f} {total['torch']:10.1f}")
    print(f"GFLOP/s: TF {flops / total['tf'] * 1e3:.0f}, PyTorch {flops / total['torch'] * 1e3:.0f}")


if __name__ == "__main__":
    main()
