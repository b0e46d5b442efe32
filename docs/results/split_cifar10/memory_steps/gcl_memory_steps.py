"""GCL's training step on the authors' ConvNet (the paper's Split CIFAR10 preset) at each memory
size of the memory study, timed in turns in one process (ratios hold on a shared machine): how the
study's GCL runs scale (issue 51). Milliseconds per step, medians.

    python docs/results/split_cifar10/memory_steps/gcl_memory_steps.py --repeats 5
"""
from __future__ import annotations

import argparse
import json


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    from gcl_tf.benchmark.timing import interleaved_seconds
    from gcl_tf.benchmark.workloads import prepare_train_step
    from gcl_tf.speed import make_model

    shape, steps = (32, 32, 3), {}
    for memory in (100, 250, 500, 1000):
        model = make_model("gcl", shape, backbone="convnet", filters=64, memory=memory, graph_lambda=50.0,
                           context_temperature=1.0, target_temperature=5.0, regularize_below=None, kernel_width=None)
        steps[memory], _ = prepare_train_step(model, shape)
    seconds = interleaved_seconds(steps, args.repeats)
    print(json.dumps({m: {"ms": round(1000 * s, 1), "vs_250": round(s / seconds[250], 3)} for m, s in seconds.items()}))


if __name__ == "__main__":
    main()
