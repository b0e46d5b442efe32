"""OnPro's step (and ER's, for the ratio between the two) against a plain PyTorch eager step of the
same shapes, side by side in ONE process (issue 70 item 6): our compiled step and the PyTorch step
are timed in turns, one call of each per round (gcl_tf.benchmark.timing.interleaved_seconds), so the
shared machine's drift falls on both and the ratios hold. Ours: the today's presets' steps (OnPro:
rotations 16, replay 64, memory 500 full, after the first task; ER: replay 64, `augment: ocl`), on
the reduced ResNet-18 at each of ``--filters``, Adam. PyTorch's: torch_onpro_step.py beside this
file, and ER's ../shared/anchors/torch_er_ocl_step.py (``--er-anchor``; no ER rows without it).

It needs TensorFlow and torch in one interpreter: a virtualenv that sees the system's packages,
with torch and without triton (PyPI's torch brings it; its LLVM and TensorFlow's crash the process
with a segmentation fault when torch's optimizer first loads it, and a CPU step never uses it):
``python -m venv --system-site-packages ENV && ENV/bin/pip install torch && ENV/bin/pip uninstall -y triton``;
then

    OMP_WAIT_POLICY=PASSIVE ENV/bin/python docs/results/split_cifar10_ocl/onpro_vs_torch.py \\
        --filters 20 64 --repeats 5 --er-anchor ../shared/anchors/torch_er_ocl_step.py \\
        --output docs/results/split_cifar10_ocl/onpro_vs_torch.json

(``--rotations 1 --memory 40 --replay 16 --repeats 1``: a wiring check of a few seconds a row.)
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = (32, 32, 3)


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours(method: str, filters: int, args):
    """Our compiled step of ``method`` at ``filters``, the memory full (OnPro: after the first task)."""
    from gcl_tf.benchmark.workloads import make_model, prepare_train_step

    keys = {"replay_batch_size": args.replay}
    if method == "onpro":
        keys["rotations"] = args.rotations
    lr = 5e-4 if method == "onpro" else 1e-3  # the presets' (configs/split_cifar10_ocl.yaml)
    model = make_model(method, SHAPE, memory=args.memory, backbone="resnet18", filters=filters,
                       augment="ocl" if method == "er" else "none",
                       settings={"train": {"optimizer": "adam", "learning_rate": lr}}, **keys)
    one, traces = prepare_train_step(model, SHAPE)  # the memory filled in task 0
    model.current_task.assign(1)
    return one, traces


def torch_step(method: str, filters: int, args):
    """PyTorch's step of the same shapes (a callable that blocks until it is done)."""
    if method == "onpro":
        anchor = load_module(os.path.join(HERE, "torch_onpro_step.py"), "torch_onpro_step")
        step, _ = anchor.build_step(filters, args.rotations, 10, args.replay, args.memory)
        return step
    return er_torch_step(load_module(args.er_anchor, "torch_er_ocl_step"), filters, args)


def er_torch_step(anchor, filters: int, args):
    """The shared ER anchor's step (its model, augmentation, Adam 1e-3, reservoir insertion)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = anchor.ReducedResNet18(filters).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mem_x, mem_y = torch.rand(args.memory, *anchor.SHAPE), torch.randint(0, 10, (args.memory,))
    x, y = torch.rand(10, *anchor.SHAPE), torch.randint(0, 10, (10,))
    replay = min(args.replay, args.memory)

    def step():
        idx = torch.randperm(args.memory)[:replay]
        with torch.no_grad():
            inputs = anchor.augment(torch.cat([x, mem_x[idx]]), "ocl")
        loss = F.cross_entropy(model(inputs), torch.cat([y, mem_y[idx]]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        slot = torch.randint(0, 10 * args.memory, (10,))  # a reservoir draw late in the stream
        keep = slot < args.memory
        mem_x[slot[keep]], mem_y[slot[keep]] = x[keep], y[keep]
        return loss.item()

    return step


def measure(args) -> dict:
    import gc

    import tensorflow as tf

    from gcl_tf.benchmark.timing import interleaved_seconds

    methods = [m for m in args.methods if m != "er" or args.er_anchor]
    rows = {}
    for filters in args.filters:  # one width at a time, the last one's steps released (OnPro's hold GBs)
        steps = {}
        for method in methods:
            steps[method, filters, "gcl_tf"], _ = ours(method, filters, args)
            steps[method, filters, "pytorch"] = torch_step(method, filters, args)
        seconds = interleaved_seconds(steps, args.repeats, warmup=args.warmup)
        del steps
        gc.collect()
        tf.keras.backend.clear_session()
        for method in methods:
            tf_ms, torch_ms = (1000 * seconds[method, filters, who] for who in ("gcl_tf", "pytorch"))
            rows[f"{method}, {filters} filters"] = {"gcl_tf_ms": tf_ms, "pytorch_ms": torch_ms,
                                                    "gcl_tf / pytorch": tf_ms / torch_ms}
            print(f"{method:6s} {filters:3d} filters  gcl_tf {tf_ms:10.1f} ms  pytorch {torch_ms:10.1f} ms  "
                  f"gcl_tf / pytorch {tf_ms / torch_ms:.3f}", flush=True)
        if {"er", "onpro"} <= set(methods):
            ratio = seconds["onpro", filters, "gcl_tf"] / seconds["er", filters, "gcl_tf"]
            rows[f"onpro / er, {filters} filters"] = {"gcl_tf": ratio, "pytorch": seconds["onpro", filters, "pytorch"]
                                                      / seconds["er", filters, "pytorch"]}
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filters", type=int, nargs="+", default=[20, 64])
    parser.add_argument("--methods", nargs="+", choices=["onpro", "er"], default=["onpro", "er"],
                        help="the steps timed (er needs --er-anchor)")
    parser.add_argument("--rotations", type=int, choices=[1, 4, 16], default=16)
    parser.add_argument("--memory", type=int, default=500)
    parser.add_argument("--replay", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--er-anchor", default=None, help="../shared/anchors/torch_er_ocl_step.py: ER rows too")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    from gcl_tf.quiet import import_tensorflow

    import_tensorflow()
    import torch

    from gcl_tf import machine

    rows = measure(args)
    if args.output:
        out = {"command": "python docs/results/split_cifar10_ocl/onpro_vs_torch.py " + " ".join(sys.argv[1:]),
               "rows": rows, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "machine": machine.describe()}
        with open(args.output, "w") as handle:
            json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
