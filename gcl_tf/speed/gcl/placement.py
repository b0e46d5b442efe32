"""The GPU check's placement runs: a GCL model built and stepped on one device, and a short
end-to-end continual run of GCL under MirroredStrategy (generated CIFAR-10-shaped images), both
checked by gcl_tf/benchmark/gpu_placement.py (every variable on its device, no variable's
contents sent to the host, the graph noise drawn on the device, one trace)."""
from __future__ import annotations

import os

from gcl_tf.benchmark.gpu_placement import check_step, check_variables, generated_cifar, mirrored_run


def placement_single(devices, quick, log) -> dict:
    """A float32 GCL model (MLP) built and stepped on the single device under test. The step's
    placement is read without XLA (see :data:`gcl_tf.benchmark.gpu_placement.XLA_OPS`)."""
    import tensorflow as tf

    from gcl_tf import speed
    from gcl_tf.benchmark import workloads
    from gcl_tf.devices import resolve_jit_compile

    memory = 20 if quick else 1000
    with tf.device(devices.single):
        model = speed.make_model("gcl", (28, 28, 1), memory=memory)
        jit = resolve_jit_compile("auto")
        step, traces = workloads.counting_step(model, False)
        x, y = workloads.random_batches((28, 28, 1), 3, seed=3)

        def run():
            for i in range(3):
                float(step(tf.constant(x[i * 10:(i + 1) * 10]), tf.constant(y[i * 10:(i + 1) * 10]))["loss"])

        result = check_step(run, lambda: len(traces), devices)
        with model.evaluation_scope():  # fills the evaluation caches on the device
            model.predict_log_probs(tf.constant(x[:10]), tf.ones([10], tf.bool), samples=2)
    result.update(check_variables(model, devices, [devices.single]), jit_compile=False, auto_jit_compile=jit)
    log(f"  single device {devices.single}: {result['variables']} variables, {len(result['misplaced'])} misplaced; "
        f"{len(result['variable_contents_to_host'])} variable copies to the host; "
        f"{result['random_ops_on_device']} random ops on the device, {len(result['random_ops_on_host'])} on the host")
    return result


def end_to_end_config(devices, quick: bool, data: str) -> dict:
    """The end-to-end run's config (a mapping): Split CIFAR-10-shaped (generated, written at
    ``data``), GCL with the ConvNet (quick: the MLP), 5 tasks, MirroredStrategy on the replica
    devices."""
    replicas = len(devices.replicas)
    per_task, memory = (20, 20) if quick else (200, 100)
    generated_cifar(data, per_class=per_task // 2 + 10, test_per_class=20 if quick else 100)
    return {
        "seed": 0,
        "benchmark": {"name": "split", "source": "npz", "dataset": "cifar10-shaped (generated)", "path": data,
                      "num_tasks": 5, "classes_per_task": 2, "samples_per_task": per_task,
                      "test_samples_per_task": 40 if quick else 200},
        "method": {"name": "gcl", "memory_size": memory, "test_graph_samples": 3 if quick else 30,
                   "context_temperature": 1.0, "target_temperature": 5.0},
        "model": {"backbone": "mlp" if quick else "convnet", "hidden_size": 32 if quick else 256},
        "train": {"optimizer": "adam", "learning_rate": 0.001, "batch_size": replicas * -(-10 // replicas),  # 10,
                  "verbose": 0, "log_every": 0, "checkpoint_every": 0,  # or the next multiple of the replicas
                  "distribute": "mirrored", "devices": devices.replicas},
        "eval": {"batch_size": replicas * -(-100 // replicas)},
    }


def end_to_end(devices, quick, folder, log) -> dict:
    """:func:`end_to_end_config`'s run, its model, variables and compiled step checked
    (:func:`gcl_tf.benchmark.gpu_placement.mirrored_run`)."""
    data = os.path.join(folder, "split_cifar10_generated.npz")
    return mirrored_run(devices, end_to_end_config(devices, quick, data), data, folder, log)
