"""The GPU check's speed rows: the precision and XLA variants (``--variants``), the rows timed
(GCL steps with the MLP and the ConvNet, GCL's 30-sample evaluation, the ER step) and their
measurement, the variants of a row timed in turns."""
from __future__ import annotations

import time

import numpy as np

from gcl_tf.errors import UserError

POLICY_NAMES = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
ALL_VARIANTS = ("float32", "float32+xla", "mixed_float16", "mixed_float16+xla", "mixed_bfloat16",
                "mixed_bfloat16+xla")


def parse_variants(text: str) -> list[tuple[str, bool]]:
    out = []
    for item in [v.strip() for v in text.split(",") if v.strip()]:
        if item not in ALL_VARIANTS:
            raise UserError(f"--variants: {item!r} is not a variant; allowed: {', '.join(ALL_VARIANTS)}")
        policy, _, xla = item.partition("+")
        out.append((policy, bool(xla)))
    if not out or ("float32", False) not in out:
        raise UserError("--variants: needs float32 (the baseline every ratio is taken to)")
    return out


def variant_name(policy: str, xla: bool) -> str:
    return POLICY_NAMES[policy] + (" + XLA" if xla else "")


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

    from gcl_tf.benchmark import workloads

    model = workloads.make_model(spec["method"], spec["shape"], memory=spec["memory"], backbone=spec["backbone"],
                                 hidden=spec["hidden"], mixed_precision=policy)
    if not spec.get("evaluation"):
        one, traces = workloads.prepare_train_step(model, spec["shape"], jit_compile=xla)
        return one, 1, traces
    workloads.fill_memory(workloads.counting_step(model)[0], model, spec["shape"])
    batch, count = (100, 2) if quick else (500, 20)
    images = [tf.constant(b) for b in np.split(workloads.random_batches(spec["shape"], count * batch // 10, seed=1)[0],
                                              count)]
    return workloads.prepare_evaluation(model, images, 30, jit_compile=xla), count * batch, None


def speed_section(devices, variants, repeats, quick, log):
    import tensorflow as tf

    from gcl_tf.benchmark.timing import interleaved_seconds

    rows = []
    for spec in row_specs(quick):
        started = time.perf_counter()
        fns, per, traces = {}, {}, {}
        with tf.device(devices.single):
            for policy, xla in variants:
                name = variant_name(policy, xla)
                fns[name], per[name], traces[name] = prepare_row(spec, policy, xla, quick)
            rounds = max(3, repeats // (4 if spec["backbone"] == "convnet" or spec.get("evaluation") else 1))
            seconds = interleaved_seconds(fns, rounds)
        ms = {name: 1e3 * seconds[name] / per[name] for name in fns}
        base = ms[variant_name("float32", False)]
        row = {"key": spec["key"], "what": spec["what"], "unit": spec["unit"], "ms": ms,
               "ratio_to_float32": {name: value / base for name, value in ms.items()},
               "traces": {name: (len(t) if t is not None else None) for name, t in traces.items()},
               "anchor": spec["anchor"], "seconds_to_measure": time.perf_counter() - started}
        rows.append(row)
        log(f"  {spec['what']}: " + ", ".join(f"{n} {v:.3g}" for n, v in ms.items()) + f" {spec['unit']}"
            f" ({row['seconds_to_measure']:.0f} s)")
    return rows
