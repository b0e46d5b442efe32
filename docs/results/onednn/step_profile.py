"""Where the GCL ConvNet step's time goes with oneDNN on (issue 36), timed in turns in one process:

    python docs/results/onednn/step_profile.py [--rounds 10]
    TF_ENABLE_ONEDNN_OPTS=0 python docs/results/onednn/step_profile.py   # the same with oneDNN off

Split CIFAR10's shapes (memory 250, batch 10, 32x32x3, the authors' 6-layer ConvNet, H 256, the
paper's GCL). Rows (ms, medians over rounds):
- ``step``: the whole compiled training step (what ``model.fit`` runs);
- ``step_xla``: the same step compiled by XLA (``train.jit_compile: true``);
- ``trunk_fwd_bwd``: the trunk alone, forward and backward with its gradients, on the 260 images;
- ``trunk_fwd``: the trunk's forward pass alone (training mode: BatchNorm on batch statistics);
- ``convs_fwd_bwd``: the trunk's six convolutions alone (no BatchNorm, ReLU or pooling), forward
  and backward: the rest of the trunk is ``trunk_fwd_bwd - convs_fwd_bwd``;
- ``graph_etc``: ``step - trunk_fwd_bwd``: heads, kernel, graph sampling and aggregation,
  regulariser, Adam and the memory update.
Thread settings need a process each (TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS).
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    from gcl_tf.quiet import import_tensorflow

    tf = import_tensorflow()
    from tensorflow.python.util import _pywrap_util_port

    from gcl_tf.benchmark.timing import cpu_model, interleaved_seconds
    from gcl_tf.benchmark.workloads import prepare_train_step
    from gcl_tf.speed import make_model

    # TensorFlow reads TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS itself; reported below
    intra, inter = os.environ.get("TF_NUM_INTRAOP_THREADS"), os.environ.get("TF_NUM_INTEROP_THREADS")
    shape = (32, 32, 3)
    keys = dict(graph_lambda=50, context_temperature=1.0, regularize_below=None, kernel_width=None)
    fns = {}
    for name, jit in (("step", False), ("step_xla", True)):
        model = make_model("gcl", shape, memory=250, backbone="convnet", hidden=256, **keys)
        fns[name], _ = prepare_train_step(model, shape, jit_compile=jit)
    trunk = model.trunk
    images = tf.random.uniform((260,) + shape)
    import keras

    convs = [layer for layer in trunk.layers if isinstance(layer, keras.layers.Conv2D)]

    @tf.function
    def trunk_fwd_bwd():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(trunk(images, training=True))
        return tape.gradient(loss, trunk.trainable_variables)

    @tf.function
    def trunk_fwd():
        return tf.reduce_sum(trunk(images, training=True))

    # each convolution on an input of the shape it meets in the trunk
    conv_inputs = [tf.random.uniform((260,) + tuple(layer.input.shape[1:])) for layer in convs]

    @tf.function
    def convs_fwd_bwd():
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(layer(inp)) for layer, inp in zip(convs, conv_inputs)])
        return tape.gradient(loss, [v for layer in convs for v in layer.trainable_variables])

    def blocking(fn):
        def run():
            out = fn()
            float(tf.reduce_sum(out[0] if isinstance(out, list) else out))
        return run

    fns.update(trunk_fwd_bwd=blocking(trunk_fwd_bwd), trunk_fwd=blocking(trunk_fwd),
               convs_fwd_bwd=blocking(convs_fwd_bwd))
    seconds = interleaved_seconds(fns, args.rounds, warmup=2)
    ms = {k: round(1000 * v, 1) for k, v in seconds.items()}
    ms["graph_etc"] = round(ms["step"] - ms["trunk_fwd_bwd"], 1)
    ms["trunk_share"] = round(ms["trunk_fwd_bwd"] / ms["step"], 3)
    ms["convs_share_of_trunk"] = round(ms["convs_fwd_bwd"] / ms["trunk_fwd_bwd"], 3)
    ms["onednn"] = bool(_pywrap_util_port.IsMklEnabled())
    ms["threads"] = {"intra": intra or "default", "inter": inter or "default"}
    ms["cpu"] = cpu_model()
    print(json.dumps(ms))


if __name__ == "__main__":
    main()
