"""The GPU check's speed rows: the precision and XLA variants (``--variants``) and the rows'
measurement, the variants of a row timed in turns (the rows themselves are the method's speed
checks': gcl_tf/speed/)."""
from __future__ import annotations

import time

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


def time_rows(devices, variants, specs, prepare, repeats, log):
    """Each row of ``specs`` timed on the single device under test, its variants in turns (medians;
    ratios to float32 without XLA). A spec: ``key``, ``what``, ``unit``, ``backbone``, ``anchor``
    and ``evaluation`` (optional; fewer rounds for it and a ConvNet); ``prepare(spec, policy, xla)``
    gives ``(one, per, traces)``: a callable timing one unit of work, the units it covers and its
    trace counter (None: not counted)."""
    import tensorflow as tf

    from gcl_tf.benchmark.timing import interleaved_seconds

    rows = []
    for spec in specs:
        started = time.perf_counter()
        fns, per, traces = {}, {}, {}
        with tf.device(devices.single):
            for policy, xla in variants:
                name = variant_name(policy, xla)
                fns[name], per[name], traces[name] = prepare(spec, policy, xla)
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
