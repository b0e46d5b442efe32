"""The GPU check: ``python -m gcl_tf.benchmark gpu --output DIR`` (one GPU: under 5 minutes).

On the visible GPUs, in one process and back to back:

1. speed: the throughput rows (GCL training step with the MLP trunk at memory 1000 and with the
   ConvNet at memory 250, GCL's 30-sample evaluation of 20 test batches of 500 images, and the
   ER step at memory 1000) under every variant of precision (``train.mixed_precision``) and XLA
   (``jit_compile``), the variants of a row timed in turns (medians; ratios to float32 without
   XLA); then the plain PyTorch GCL step and evaluation of the same shapes
   (gcl_tf/speed/gcl/anchors/torch_gcl_step.py, eager and torch.compile) when torch is
   importable with CUDA, and our times as ratios to theirs;
2. placement: a GCL model on the first GPU and a short end-to-end continual run (Split
   CIFAR-10-shaped generated images, the ConvNet, 5 tasks) under MirroredStrategy on all visible
   GPUs. For both it asserts that every variable (weights, optimizer slots, the memory, the test
   noise cache) lives on its replica's GPU, and, from the partitioned graphs TensorFlow actually
   ran (run metadata of the compiled step), that the random ops drawing the graph noise run on
   the GPU and that no step sends the contents of a variable (a read of the memory, a weight,
   passed on only by ops that move data: gathers, slices, concatenations, casts) to the host;
   every step traces once;
3. the verdict: which ``jit_compile`` choice the measured rows support, against the one
   ``train.jit_compile: auto`` makes on this device type (gcl_tf/devices.py).

Writes DIR/gpu_check.md (the tables) and DIR/gpu_check.json; exit status 1 if an assertion
failed (the report says which). Without a visible GPU it says so in one line and exits 0.

``--device cpu`` runs the whole check on the CPU, split into three logical devices: the host
(CPU:0) and two "accelerators" (CPU:1 for the single-device rows, CPU:1 and CPU:2 as the
mirrored replicas), so that every assertion and output is exercised without a GPU (the tests
do); its timings are not GPU figures. ``--quick`` shrinks sizes and repeats (a smoke test).

This module is the command (GCL's speed checks, run by ``python -m gcl_tf.benchmark gpu``); its
parts here: rows.py (the speed rows), anchor.py (the PyTorch anchor), placement.py (the GCL model
on one device, the end-to-end run), report.py (the tables); in gcl_tf/benchmark/, what names no
method: gpu_devices.py (the devices under test, whether torch can run), gpu_speed.py (the variants
and their timing), gpu_placement.py (the placement assertions, the mirrored run), gpu_report.py
(the failures, the verdict).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from gcl_tf.benchmark.gpu_devices import (  # noqa: F401 (Devices, torch_probe: re-exported)
    Devices,
    environment,
    setup_devices,
    torch_probe,
)
from gcl_tf.benchmark.gpu_placement import check_step, check_variables  # noqa: F401 (re-exported)
from gcl_tf.benchmark.gpu_report import failures, verdict
from gcl_tf.benchmark.gpu_speed import ALL_VARIANTS, parse_variants
from gcl_tf.errors import UserError, exit_on_user_error
from gcl_tf.io import write_atomic, write_json_atomic
from gcl_tf.speed.gcl.anchor import anchor_section
from gcl_tf.speed.gcl.placement import end_to_end, placement_single
from gcl_tf.speed.gcl.report import markdown
from gcl_tf.speed.gcl.rows import speed_section


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.benchmark gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="folder for gpu_check.md, gpu_check.json and the end-to-end run")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                        help="gpu (default): the visible GPUs; cpu: the same check on three logical CPU devices")
    parser.add_argument("--variants", default=",".join(ALL_VARIANTS),
                        help=f"precision and XLA variants of the speed rows (default: all: {','.join(ALL_VARIANTS)})")
    parser.add_argument("--repeats", type=int, default=20, help="timed rounds per row (medians)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke test)")
    return parser


@exit_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    variants = parse_variants(args.variants)
    if args.repeats < 1:
        raise UserError("--repeats: a positive integer")
    devices = setup_devices(args.device)
    if devices is None:
        print("no GPU visible to TensorFlow (tf.config.list_physical_devices('GPU') is empty): nothing to check; "
              "--device cpu runs the same check on the CPU")
        return 0
    import tempfile

    started = time.perf_counter()
    repeats = 3 if args.quick else args.repeats

    def log(text):
        print(text, flush=True)

    command = "python -m gcl_tf.benchmark gpu " + " ".join(argv if argv is not None else sys.argv[1:])
    report = {"command": command, "environment": environment(devices), "variants": variants, "quick": args.quick}
    log(f"devices under test: {devices.kind} {devices.single} (replicas: {', '.join(devices.replicas)})")
    log("speed rows ...")
    report["rows"] = speed_section(devices, variants, repeats, args.quick, log)
    log("PyTorch anchor ...")
    report["anchor"] = anchor_section(devices, report["rows"], args.quick, log)
    log("placement, one device ...")
    report["placement"] = placement_single(devices, args.quick, log)
    log("end-to-end continual run, MirroredStrategy ...")
    with tempfile.TemporaryDirectory(prefix="gcl_tf-gpu-check-") as scratch:
        folder = os.path.join(args.output, "end_to_end") if args.output else scratch
        os.makedirs(folder, exist_ok=True)
        report["end_to_end"] = end_to_end(devices, args.quick, folder, log)
    report["verdict"] = verdict(report["rows"], devices.kind)
    report["failures"] = failures(report)
    report["seconds"] = time.perf_counter() - started
    text = markdown(report)
    print(text)
    if args.output:
        os.makedirs(args.output, exist_ok=True)
        write_atomic(os.path.join(args.output, "gpu_check.md"), text)
        write_json_atomic(os.path.join(args.output, "gpu_check.json"), json.loads(json.dumps(report, default=list)))
    if report["failures"]:
        print(f"error: GPU check failed: {report['failures'][0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
