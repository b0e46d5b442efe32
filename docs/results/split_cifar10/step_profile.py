"""Where a GCL ConvNet training step's time goes on this CPU (Split CIFAR10's shapes: memory 250,
batch 10, 32x32x3, the authors' 6-layer ConvNet, H 256), timed in turns in one process:

    python docs/results/split_cifar10/step_profile.py [--rounds 20]

- ``step``: the whole compiled training step (train_step: trunk forward and backward on the
  260 images, heads, graph, regulariser, Adam, memory update), float32;
- ``trunk``: the trunk alone, forward and backward on 260 images with its gradient (the ConvNet's
  share of the step);
- ``graph``: the step minus the trunk, estimated as step - trunk;
- ``step_bf16``: the whole step with ``train.mixed_precision: mixed_bfloat16`` (layers compute in
  bfloat16 on CPUs with AVX512_BF16 / AMX);
- ``trunk_bf16``: the trunk alone under bfloat16.
Thread settings need a process each: run it with TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS
set, interleaving processes (farm-bench), to compare them.
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    import tensorflow as tf

    intra, inter = os.environ.get("TF_NUM_INTRAOP_THREADS"), os.environ.get("TF_NUM_INTEROP_THREADS")
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(int(intra))
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(int(inter))

    from gcl_tf.benchmark.timing import interleaved_seconds
    from gcl_tf.benchmark.workloads import prepare_train_step
    from gcl_tf.speed import make_model

    shape = (32, 32, 3)
    fns = {}
    for name, policy in (("", "float32"), ("_bf16", "mixed_bfloat16")):
        model = make_model("gcl", shape, memory=250, backbone="convnet", hidden=256, mixed_precision=policy,
                           graph_lambda=50, context_temperature=1.0, regularize_below=None, kernel_width=None)
        step, _ = prepare_train_step(model, shape)
        images = tf.random.uniform((260,) + shape)
        trunk = model.trunk

        @tf.function
        def trunk_step(images=images, trunk=trunk):
            with tf.GradientTape() as tape:
                out = tf.cast(trunk(images, training=True), tf.float32)
                loss = tf.reduce_sum(out)
            return tape.gradient(loss, trunk.trainable_variables)

        def trunk_one(fn=trunk_step):
            grads = fn()
            float(tf.reduce_sum(grads[0]))

        fns["step" + name], fns["trunk" + name] = step, trunk_one
    seconds = interleaved_seconds(fns, args.rounds, warmup=2)
    ms = {k: round(1000 * v, 1) for k, v in seconds.items()}
    ms["graph"] = round(ms["step"] - ms["trunk"], 1)
    ms["trunk_share"] = round(ms["trunk"] / ms["step"], 3)
    ms["bf16_speedup_step"] = round(ms["step"] / ms["step_bf16"], 3)
    ms["bf16_speedup_trunk"] = round(ms["trunk"] / ms["trunk_bf16"], 3)
    ms["threads"] = {"intra": intra or "default", "inter": inter or "default"}
    print(json.dumps(ms))


if __name__ == "__main__":
    main()
