"""Speed of the compiled steps: ``python -m gcl_tf.benchmark throughput [--output DIR]``.

Everything is measured in one process, after warm-up, as medians of repeated timings; speeds are
reported as fractions of a dense float32 matmul timed in turns with each row (one matmul, one
step, one matmul, ...), and variants compared within a section are timed in turns too: these
machines are shared and their speed drifts within a run. Sections:

- GCL training step: MLP trunk at memory 1000 (28x28x1), ConvNet at memory 250 (32x32x3);
  median ms per step, stream images per second, the analytic FLOPs of the step, achieved GFLOP/s
  and its fraction of the matmul rate;
- GCL evaluation of a test split with 30 graph samples against 1 sample (ms per image and
  their ratio), and 30 samples without the evaluation's caches (memory embeddings, test noise);
- ER and Finetune steps through ``model.fit`` with ``steps_per_execution`` 1 and 20 (Keras's
  per-step Python overhead);
- the input pipeline: the fraction of a fit's time spent waiting for the tf.data stream;
- growth with memory size (100 .. 5000; full memory, ``edge_memory: embeddings``, and
  ``context_batch``): a table and a plot, with the number of traces of the step (1: no retracing).

``--quick`` shrinks everything (memories of 200 and 50, few repeats, a two-point sweep): a smoke
test of the benchmark itself, used by the tests; its figures are not the ones to quote.

This module holds the sections, the report and the command (GCL's speed checks, run by
``python -m gcl_tf.benchmark throughput``); flops.py here GCL's analytic FLOPs, against_torch.py
the section against PyTorch; in gcl_tf/benchmark/, what names no method: timing.py the clocks and
the matmul reference, flops.py the FLOPs of Keras layers and the GEMMs timed alone, workloads.py
the models and compiled steps timed.
"""
from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from gcl_tf.benchmark.flops import time_gemms
from gcl_tf.benchmark.timing import MATMUL_SIZE, MatmulReference, interleaved_seconds
from gcl_tf.benchmark.workloads import counting_step, fill_memory, random_batches, time_train_step
from gcl_tf.errors import exit_on_user_error
from gcl_tf.io import write_atomic, write_json_atomic
from gcl_tf.speed import make_model
from gcl_tf.speed.gcl import against_torch
from gcl_tf.speed.gcl.flops import gcl_eval_flops, gcl_step_flops, gcl_step_gemms


# ----------------------------------------------------------------------------- sections
def gcl_step_section(reference, repeats, quick):
    rows = []
    mlp_memory, conv_memory = (200, 50) if quick else (1000, 250)
    for name, shape, memory, backbone, jit in [
        (f"GCL step, MLP, memory {mlp_memory}", (28, 28, 1), mlp_memory, "mlp", False),
        (f"GCL step, MLP, memory {mlp_memory}, XLA (jit_compile)", (28, 28, 1), mlp_memory, "mlp", True),
        (f"GCL step, ConvNet, memory {conv_memory}", (32, 32, 3), conv_memory, "convnet", False),
    ]:
        model = make_model("gcl", shape, memory=memory, backbone=backbone)
        steps = max(3, repeats // (4 if backbone == "convnet" else 1))
        seconds, traces, rate = time_train_step(model, shape, steps, jit, reference)
        flops = gcl_step_flops(model, 10)
        rows.append({
            "what": name, "ms": 1e3 * seconds, "images_per_s": 10 / seconds, "gflop": flops / 1e9,
            "gflops": flops / seconds / 1e9, "matmul_gflops": rate, "fraction_of_matmul": flops / seconds / 1e9 / rate,
            "traces": traces,
        })
        if backbone == "mlp" and not jit:
            # The ceiling: the same step's GEMMs alone, back to back, with no other work at all.
            gemms = gcl_step_gemms(model, 10)
            seconds, rate = time_gemms(gemms, repeats, reference)
            gemm_flops = sum(2.0 * m * k * n for m, k, n, *_ in gemms)
            rows.append({
                "what": f"the same step's {len(gemms)} GEMMs alone (its ceiling)", "ms": 1e3 * seconds,
                "images_per_s": 10 / seconds, "gflop": gemm_flops / 1e9, "gflops": gemm_flops / seconds / 1e9,
                "matmul_gflops": rate, "fraction_of_matmul": gemm_flops / seconds / 1e9 / rate, "traces": 1,
            })
    return rows


def gcl_eval_section(reference, repeats, quick):
    """One evaluation pass over a test split (20 batches of 500 images; 4 in quick mode), as the
    training loop runs it at each task end (inside ``model.evaluation_scope()``): ms per image
    with 1 and 30 graph samples, and 30 samples without the evaluation's caches (the memory's
    embeddings computed per batch; and the test noise drawn per batch too), timed in turns. The
    training step counter moves before every pass, so every pass draws its own noise."""
    import contextlib

    import tensorflow as tf

    shape = (28, 28, 1)
    memory = 200 if quick else 1000
    model = make_model("gcl", shape, memory=memory)
    fill_memory(counting_step(model)[0], model, shape)
    batch, count = 500, (4 if quick else 20)
    images = [tf.constant(b) for b in np.split(random_batches(shape, count * batch // 10, seed=1)[0], count)]
    mask = tf.ones([10], tf.bool)

    def evaluation(predict, samples, scope):
        model.step_counter.assign_add(1)  # a new evaluation: a new seed
        with scope():
            for b in images:
                out = predict(b, samples)
            out.numpy()

    noise_cache = model._test_noise
    variants = [(1, True, True), (30, True, True), (30, False, True), (30, False, False)]
    passes = {}
    for samples, contexts_cached, noise_cached in variants:
        model._test_noise = noise_cache if noise_cached else None  # read when predict is traced
        predict = tf.function(lambda x, s: model.predict_log_probs(x, mask, samples=s))
        scope = model.evaluation_scope if contexts_cached else contextlib.nullcontext
        passes[(samples, contexts_cached, noise_cached)] = (
            lambda predict=predict, samples=samples, scope=scope: evaluation(predict, samples, scope))
        passes[(samples, contexts_cached, noise_cached)]()  # trace it with this cache
    model._test_noise = noise_cache
    seconds_per_pass = interleaved_seconds({**passes, "matmul": reference.matmul}, max(3, repeats // 4))
    rate = reference.rate(seconds_per_pass["matmul"])
    rows = []
    for samples, contexts_cached, noise_cached in variants:
        seconds = seconds_per_pass[(samples, contexts_cached, noise_cached)] / (count * batch)
        flops = gcl_eval_flops(model, count * batch, samples, 1 if contexts_cached else count) / (count * batch)
        what = f"GCL evaluation, {samples} graph sample{'s' if samples > 1 else ''}"
        if not contexts_cached:
            what += ", memory embedded per batch" + (", noise drawn per batch" if not noise_cached else "")
        rows.append({"what": what, "samples": samples, "ms_per_image": 1e3 * seconds, "gflops": flops / seconds / 1e9,
                     "matmul_gflops": rate, "fraction_of_matmul": flops / seconds / 1e9 / rate})
    model._test_noise = noise_cache
    ratio = rows[1]["ms_per_image"] / rows[0]["ms_per_image"]
    flop_ratio = gcl_eval_flops(model, count * batch, 30) / gcl_eval_flops(model, count * batch, 1)
    return rows, ratio, flop_ratio


def keras_overhead_section(repeats, quick):
    """ER and Finetune through model.fit: ms per step with steps_per_execution 1 and 20 (timed in turns)."""
    import tensorflow as tf

    shape = (28, 28, 1)
    steps = 40 if quick else 400
    x, y = random_batches(shape, steps)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(10, drop_remainder=True).cache().prefetch(8)
    fits = {}
    for method in ("er", "finetune"):
        for per_call in (1, 20):
            extra = {"memory": 1000} if method == "er" else {}
            model = make_model(method, shape, hidden=400, steps_per_execution=per_call, **extra)
            fits[f"{method}, steps_per_execution {per_call}"] = (
                lambda model=model: model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0))
    seconds = interleaved_seconds(fits, max(3, repeats // 5))  # in turns: the ratios hold under drift
    return [{"what": what, "ms_per_step": 1e3 * seconds[what] / steps} for what in fits]


def input_pipeline_section(repeats, quick):
    """Fraction of a fit's time spent waiting for input: the real task stream against the same
    number of steps on one batch already in memory (timed in turns)."""
    import tensorflow as tf

    from gcl_tf.data.sources import SplitData
    from gcl_tf.data.streams import train_dataset

    shape = (28, 28, 1)
    rows = []
    for method, extra in (("gcl", {"memory": 250}), ("er", {"memory": 1000})):
        rng = np.random.default_rng(0)
        data = SplitData(rng.integers(0, 256, (1000,) + shape, dtype=np.uint8), rng.integers(0, 10, 1000))
        stream, steps = train_dataset(data, 10, 1, 0, 0)
        x, y = random_batches(shape, 1)
        constant = tf.data.Dataset.from_tensors((tf.constant(x), tf.constant(y))).repeat()
        if quick:
            extra = {"memory": 50}
        model = make_model(method, shape, **extra)
        times = interleaved_seconds({
            "fed": lambda: model.fit(stream, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False),
            "resident": lambda: model.fit(constant, epochs=1, steps_per_epoch=steps, verbose=0),
        }, max(3, repeats // 4))
        fed, resident = times["fed"], times["resident"]
        rows.append({"what": f"{method} ({steps} steps)", "ms_per_step": 1e3 * fed / steps,
                     "input_wait_fraction": max(0.0, (fed - resident) / fed)})
    return rows


def memory_sweep_section(reference, repeats, quick, sizes):
    rows = []
    variants = [("matrix", {}), ("embeddings", {"edge_memory": "embeddings"}),
                ("context_batch 250", {"edge_memory": "embeddings", "context_batch": 250})]
    shape = (28, 28, 1)
    for memory in sizes:
        for name, keys in variants:
            if "context_batch" in keys and keys["context_batch"] > memory:
                continue
            model = make_model("gcl", shape, memory=memory, **keys)
            seconds, traces, rate = time_train_step(model, shape, max(3, repeats // (1 + memory // 1000)),
                                                    reference=reference)
            flops = gcl_step_flops(model, 10)
            rows.append({"memory": memory, "variant": name, "ms": 1e3 * seconds, "gflops": flops / seconds / 1e9,
                         "matmul_gflops": rate, "fraction_of_matmul": flops / seconds / 1e9 / rate, "traces": traces})
            print(f"  memory {memory:5d} {name:18s} {1e3 * seconds:8.1f} ms/step  traces {traces}", flush=True)
    return rows


# ----------------------------------------------------------------------------- report
def markdown(report) -> str:
    lines = ["# Throughput", "", f"Command: `{report['command']}`", "",
             f"Dense float32 matmul ({MATMUL_SIZE}^3) in this process, timed in turns with every row: "
             f"median **{report['matmul_gflops']:.0f} GFLOP/s** (from {report['matmul_gflops_range'][0]:.0f} to "
             f"{report['matmul_gflops_range'][1]:.0f} over the run); each row's fraction is of the matmul timed "
             f"in turns with it."]
    for key, part in (("gcl_steps", _steps_markdown), ("gcl_eval", _eval_markdown), ("keras_overhead", _keras_markdown),
                      ("input_pipeline", _input_markdown), ("memory_sweep", _sweep_markdown),
                      ("against_torch", lambda report: against_torch.markdown(report["against_torch"]))):
        if key in report:
            lines += part(report)
    return "\n".join(lines) + "\n"


def _steps_markdown(report) -> list[str]:
    lines = ["", "| step | ms/step | images/s | GFLOP/step | GFLOP/s | matmul GFLOP/s | of matmul | traces |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["gcl_steps"]:
        lines.append(f"| {r['what']} | {r['ms']:.1f} | {r['images_per_s']:.0f} | {r['gflop']:.2f} | {r['gflops']:.0f} "
                     f"| {r['matmul_gflops']:.0f} | {100 * r['fraction_of_matmul']:.0f}% | {r['traces']} |")
    steps = report["gcl_steps"]
    if len(steps) > 1 and "GEMMs alone" in steps[1]["what"]:
        step, ceiling = steps[0], steps[1]
        lines.append(f"\nThe MLP step runs at {100 * step['fraction_of_matmul']:.0f}% of the matmul rate; its GEMMs "
                     f"alone, back to back with no other work, at {100 * ceiling['fraction_of_matmul']:.0f}% "
                     f"({ceiling['ms']:.1f} ms): everything else in the step (graph sampling, regulariser, "
                     f"memory update, optimizer) costs {step['ms'] - ceiling['ms']:.1f} ms.")
    return lines


def _eval_markdown(report) -> list[str]:
    lines = ["", "| evaluation | ms/image | GFLOP/s | of matmul |", "|---|---|---|---|"]
    for r in report["gcl_eval"]:
        lines.append(f"| {r['what']} | {r['ms_per_image']:.3f} | {r['gflops']:.0f} "
                     f"| {100 * r['fraction_of_matmul']:.0f}% |")
    lines.append(f"\n30 graph samples cost **{report['eval_ratio']:.2f}x** one sample; their analytic FLOPs are "
                 f"{report['eval_flop_ratio']:.2f}x (each sample is an [N, M] x [M, H + K + 1] GEMM).")
    return lines


def _keras_markdown(report) -> list[str]:
    return ["", "| Keras fit | ms/step |", "|---|---|"] + [
        f"| {r['what']} | {r['ms_per_step']:.2f} |" for r in report["keras_overhead"]]


def _input_markdown(report) -> list[str]:
    return ["", "| input pipeline | ms/step | waiting for input |", "|---|---|---|"] + [
        f"| {r['what']} | {r['ms_per_step']:.2f} | {100 * r['input_wait_fraction']:.1f}% |"
        for r in report["input_pipeline"]]


def _sweep_markdown(report) -> list[str]:
    return ["", "| memory | variant | ms/step | GFLOP/s | of matmul | traces |", "|---|---|---|---|---|---|"] + [
        f"| {r['memory']} | {r['variant']} | {r['ms']:.1f} | {r['gflops']:.0f} "
        f"| {100 * r['fraction_of_matmul']:.0f}% | {r['traces']} |" for r in report["memory_sweep"]]


def plot_sweep(rows, path):
    from gcl_tf.benchmark.plots import new_figure, save_figure

    figure = new_figure(6, 4)
    ax = figure.subplots()
    for variant in dict.fromkeys(r["variant"] for r in rows):
        points = [(r["memory"], r["ms"]) for r in rows if r["variant"] == variant]
        ax.plot(*zip(*points), marker="o", label=variant)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("memory size M")
    ax.set_ylabel("ms per GCL training step")
    ax.set_title("GCL step time vs memory size (MLP, batch 10)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save_figure(figure, path)


SECTIONS = ("steps", "eval", "keras", "input", "sweep", "torch")


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m gcl_tf.benchmark throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="folder for throughput.md, throughput.json and memory_sweep.png")
    parser.add_argument("--repeats", type=int, default=20, help="timed repeats per measurement (median)")
    parser.add_argument("--memory-sizes", default="100,250,500,1000,2000,5000", help="the sweep's memory sizes")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)} (torch: against PyTorch, "
                             "when it is importable)")
    parser.add_argument("--torch-rounds", type=int, default=3, help="rounds of the PyTorch alternation")
    parser.add_argument("--quick", action="store_true", help="few repeats and a small sweep (a smoke test)")
    return parser


def parse_args(argv):
    from gcl_tf.errors import UserError

    args = build_parser().parse_args(argv)
    try:
        args.memory_sizes = [int(s) for s in args.memory_sizes.split(",") if s]
    except ValueError:
        raise UserError(f"--memory-sizes: {args.memory_sizes!r} is not a comma-separated list of integers") from None
    if args.repeats < 1 or args.torch_rounds < 1 or not args.memory_sizes or min(args.memory_sizes) < 1:
        raise UserError("--repeats, --torch-rounds and --memory-sizes: positive integers")
    args.sections = [name.strip() for name in args.sections.split(",") if name.strip()]
    unknown = [name for name in args.sections if name not in SECTIONS]
    if unknown or not args.sections:
        raise UserError(f"--sections: {','.join(unknown) or 'none given'} unknown; allowed: {','.join(SECTIONS)}")
    return args


def run_sections(args, reference, repeats) -> dict:
    report = {}
    if "steps" in args.sections:
        print("GCL training steps ...", flush=True)
        report["gcl_steps"] = gcl_step_section(reference, repeats, args.quick)
        for r in report["gcl_steps"]:
            print(f"  {r['what']}: {r['ms']:.1f} ms, {r['gflops']:.0f} GFLOP/s = "
                  f"{100 * r['fraction_of_matmul']:.0f}% of matmul", flush=True)
    if "eval" in args.sections:
        print("GCL evaluation ...", flush=True)
        report["gcl_eval"], report["eval_ratio"], report["eval_flop_ratio"] = gcl_eval_section(
            reference, repeats, args.quick)
        print(f"  30 samples / 1 sample: {report['eval_ratio']:.2f}x (analytic FLOPs "
              f"{report['eval_flop_ratio']:.2f}x)", flush=True)
    if "keras" in args.sections:
        print("Keras overhead ...", flush=True)
        report["keras_overhead"] = keras_overhead_section(repeats, args.quick)
    if "input" in args.sections:
        print("input pipeline ...", flush=True)
        report["input_pipeline"] = input_pipeline_section(repeats, args.quick)
    if "sweep" in args.sections:
        print("memory sweep ...", flush=True)
        sizes = [50, 100] if args.quick else args.memory_sizes
        report["memory_sweep"] = memory_sweep_section(reference, repeats, args.quick, sizes)
    if "torch" in args.sections:
        print("against PyTorch (a fresh process per measurement, in turns) ...", flush=True)
        rounds = 1 if args.quick else args.torch_rounds
        quick = {"regimes": ("mnist",), "steps": {"mnist": 3}} if args.quick else {}  # the wiring only
        report["against_torch"] = against_torch.section(rounds, lambda line: print(line, flush=True), **quick)
    return report


@exit_on_user_error
def main(argv=None) -> int:
    from gcl_tf.quiet import import_tensorflow

    args = parse_args(argv)
    import_tensorflow()
    repeats = 3 if args.quick else args.repeats
    command = "python -m gcl_tf.benchmark throughput " + " ".join(argv if argv is not None else sys.argv[1:])
    print("matmul ...", flush=True)
    reference = MatmulReference(repeats)
    print(f"  {reference():.0f} GFLOP/s", flush=True)
    report = {"command": command, **run_sections(args, reference, repeats),
              "matmul_gflops": float(np.median(reference.rates)),
              "matmul_gflops_range": [min(reference.rates), max(reference.rates)]}
    text = markdown(report)
    print(text)
    if args.output:
        os.makedirs(args.output, exist_ok=True)
        write_atomic(os.path.join(args.output, "throughput.md"), text)
        write_json_atomic(os.path.join(args.output, "throughput.json"), report)
        if "memory_sweep" in report:
            plot_sweep(report["memory_sweep"], os.path.join(args.output, "memory_sweep.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
