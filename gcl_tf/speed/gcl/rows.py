"""The GPU check's speed rows: GCL's steps with the MLP and the ConvNet, its 30-sample evaluation,
and the ER step, each under every precision and XLA variant (measured by
:func:`gcl_tf.benchmark.gpu_speed.time_rows`, the variants of a row in turns)."""
from __future__ import annotations

import numpy as np

from gcl_tf.benchmark.gpu_speed import time_rows


def row_specs(quick: bool) -> list[dict]:
    m_mlp, m_conv, m_er, hidden = (20, 10, 20, 32) if quick else (1000, 250, 1000, 256)
    return [
        {"key": "gcl_mlp_step", "what": f"GCL step, MLP, memory {m_mlp}", "unit": "ms/step", "method": "gcl",
         "shape": (28, 28, 1), "memory": m_mlp, "backbone": "mlp", "hidden": hidden, "anchor": ("mnist", "step")},
        {"key": "gcl_convnet_step", "what": f"GCL step, ConvNet, memory {m_conv}", "unit": "ms/step", "method": "gcl",
         "shape": (32, 32, 3), "memory": m_conv, "backbone": "convnet", "hidden": hidden,
         "anchor": ("cifar", "step")},
        {"key": "gcl_eval_30", "what": f"GCL evaluation, 30 graph samples, memory {m_mlp}", "unit": "ms/image",
         "method": "gcl", "shape": (28, 28, 1), "memory": m_mlp, "backbone": "mlp", "hidden": hidden,
         "evaluation": True, "anchor": ("mnist", "eval")},
        {"key": "er_step", "what": f"ER step, memory {m_er}", "unit": "ms/step", "method": "er", "shape": (28, 28, 1),
         "memory": m_er, "backbone": "mlp", "hidden": hidden, "anchor": None},
    ]


def prepare_row(spec, policy, xla, quick):
    """A callable timing one unit of work of ``spec`` under (policy, xla), the images it covers
    and its trace counter (None for the evaluation, traced once per pass shape)."""
    import tensorflow as tf

    from gcl_tf import speed
    from gcl_tf.benchmark import workloads

    model = speed.make_model(spec["method"], spec["shape"], memory=spec["memory"], backbone=spec["backbone"],
                                 hidden=spec["hidden"], mixed_precision=policy)
    if not spec.get("evaluation"):
        one, traces = workloads.prepare_train_step(model, spec["shape"], jit_compile=xla)
        return one, 1, traces
    workloads.fill_memory(workloads.counting_step(model)[0], model, spec["shape"])
    batch, count = (100, 2) if quick else (500, 20)
    images = [tf.constant(b) for b in np.split(workloads.random_batches(spec["shape"], count * batch // 10, seed=1)[0],
                                              count)]
    return prepare_evaluation(model, images, 30, jit_compile=xla), count * batch, None


def prepare_evaluation(model, images, samples: int, jit_compile: bool = False):
    """``evaluation()``: one GCL evaluation pass over the test batches ``images`` with ``samples``
    graph samples, as the training loop runs it (inside ``model.evaluation_scope()``, after a
    step counter move: every pass draws its own noise); traced by its first call here."""
    import tensorflow as tf

    mask = tf.ones([model.num_classes], tf.bool)
    predict = tf.function(lambda x: model.predict_log_probs(x, mask, samples=samples), jit_compile=jit_compile)

    def evaluation():
        model.step_counter.assign_add(1)  # a new evaluation: a new seed
        with model.evaluation_scope():
            for batch in images:
                out = predict(batch)
            out.numpy()

    evaluation()
    return evaluation




def speed_section(devices, variants, repeats, quick, log):
    def prepare(spec, policy, xla):
        return prepare_row(spec, policy, xla, quick)

    return time_rows(devices, variants, row_specs(quick), prepare, repeats, log)
