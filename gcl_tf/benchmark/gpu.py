"""The GPU check: ``python -m gcl_tf.benchmark gpu --output DIR`` (one GPU: under 5 minutes).

On the visible GPUs, in one process and back to back:

1. speed: the throughput rows (GCL training step with the MLP trunk at memory 1000 and with the
   ConvNet at memory 250, GCL's 30-sample evaluation of 20 test batches of 500 images, and the
   ER step at memory 1000) under every variant of precision (``train.mixed_precision``) and XLA
   (``jit_compile``), the variants of a row timed in turns (medians; ratios to float32 without
   XLA); then the plain PyTorch GCL step and evaluation of the same shapes
   (gcl_tf/benchmark/anchors/torch_gcl_step.py, eager and torch.compile) when torch is
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
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from gcl_tf.errors import UserError, exit_on_user_error
from gcl_tf.io import write_atomic, write_json_atomic

ANCHOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "anchors", "torch_gcl_step.py")
POLICY_NAMES = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
ALL_VARIANTS = ("float32", "float32+xla", "mixed_float16", "mixed_float16+xla", "mixed_bfloat16",
                "mixed_bfloat16+xla")
# Ops that pass data on without computing with it: a variable's value that reaches a send to the
# host through these alone is that variable's contents copied to the host.
DATA_MOVEMENT_OPS = {
    "Identity", "IdentityN", "Snapshot", "Switch", "Merge", "Enter", "Exit", "NextIteration", "Cast",
    "Reshape", "Squeeze", "ExpandDims", "Transpose", "ConjugateTranspose", "GatherV2", "Gather", "GatherNd",
    "ConcatV2", "Concat", "Pack", "Unpack", "Split", "SplitV", "Slice", "StridedSlice", "Tile", "Pad", "PadV2",
    "Select", "SelectV2", "TensorScatterUpdate", "BroadcastTo", "ZerosLike", "OnesLike", "Bitcast",
    "CollectiveGather", "CollectiveGatherV2",
}
VARIABLE_READ_OPS = {"ReadVariableOp", "ResourceGather", "ResourceGatherNd", "ResourceStridedSlice"}
FLOAT_TYPES = {1, 2, 14, 19}  # DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF
# An XLA computation runs whole on one device: what it draws (the graph noise, under jit_compile)
# is not visible as ops, but it is drawn where the computation runs.
XLA_OPS = {"_XlaCompile", "_XlaRun", "XlaLaunch", "_XlaMerge"}
# TensorFlow records no placed graph for a function compiled whole by XLA (jit_compile=True): it
# is one XLA computation on one device. The placement checks therefore trace the same step
# without XLA, where every op's placement is recorded; under XLA those ops run inside one
# computation on the device the step was placed on.
PLACEMENT_WITHOUT_XLA = True


# ----------------------------------------------------------------------------- devices
class Devices:
    """The devices under test: ``single`` (the rows, the single-device placement) and
    ``replicas`` (MirroredStrategy); everything else is the host."""

    def __init__(self, kind: str, single: str, replicas: list[str]):
        self.kind, self.single, self.replicas = kind, single, list(replicas)

    @staticmethod
    def key(device: str) -> tuple:
        import tensorflow as tf

        spec = tf.DeviceSpec.from_string(device)
        return (spec.device_type or "CPU").upper(), spec.device_index or 0

    def under_test(self, device: str) -> bool:
        return self.key(device) in {self.key(d) for d in self.replicas + [self.single]}


def setup_devices(kind: str):
    """Configure TensorFlow's devices (before it starts) and return :class:`Devices`, or None
    when ``kind`` is gpu and no GPU is visible."""
    from gcl_tf.quiet import import_tensorflow

    tf = import_tensorflow()
    if kind == "cpu":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
        return Devices("CPU", "/CPU:1", ["/CPU:1", "/CPU:2"])
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    for gpu in gpus:  # the PyTorch anchor runs beside this process: take GPU memory as needed
        tf.config.experimental.set_memory_growth(gpu, True)
    return Devices("GPU", "/GPU:0", [f"/GPU:{i}" for i in range(len(gpus))])


def environment(devices: Devices) -> dict:
    import keras
    import tensorflow as tf

    details = []
    for gpu in tf.config.list_physical_devices("GPU"):
        info = tf.config.experimental.get_device_details(gpu)
        details.append({"name": info.get("device_name", gpu.name),
                        "compute_capability": list(info.get("compute_capability", ()) or ())})
    return {"tensorflow": tf.__version__, "keras": keras.__version__, "device_kind": devices.kind,
            "single_device": devices.single, "replica_devices": devices.replicas, "gpus": details,
            "logical_devices": [d.name for d in tf.config.list_logical_devices()]}


# ----------------------------------------------------------------------------- speed rows
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


# ----------------------------------------------------------------------------- PyTorch anchor
def torch_probe(device_kind: str) -> tuple[dict | None, str]:
    """``(info, note)``: torch's version when it is importable in this Python (with CUDA when the
    check runs on GPUs), else None and a one-line note saying why the anchor rows are skipped."""
    code = "import torch; print(torch.__version__, torch.cuda.is_available())"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, "PyTorch anchor skipped: importing torch took over 5 minutes"
    if proc.returncode != 0:
        return None, "PyTorch anchor skipped: torch is not importable here (pip install torch to compare)"
    version, cuda = proc.stdout.split()[-2:]
    if device_kind == "GPU" and cuda != "True":
        return None, f"PyTorch anchor skipped: torch {version} has no CUDA (a CPU-only build)"
    return {"version": version, "cuda": cuda == "True"}, ""


def run_anchor(regime: str, what: str, mode: str, device_kind: str, steps: int, timeout: int) -> dict:
    device = "cuda" if device_kind == "GPU" else "cpu"
    args = [sys.executable, ANCHOR, regime, str(steps), device, mode, what]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    line = next((text for text in proc.stdout.splitlines() if text.startswith("torch ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail[:300]}
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    ms = float(fields["median_ms_per_image"] if what == "eval" else fields["median_ms_per_step"])
    return {"ms": ms, "line": line, "command": " ".join(["python"] + args[1:])}


def anchor_section(devices, rows, quick, log):
    info, note = torch_probe(devices.kind)
    if info is None:
        log(f"  {note}")
        return {"note": note, "runs": {}}
    modes = ("eager",) if quick else ("eager", "compile")
    runs = {}
    for row in rows:
        if not row["anchor"] or (quick and row["anchor"] != ("mnist", "step")):  # quick: the wiring only
            continue
        regime, what = row["anchor"]
        for mode in modes if what == "step" else modes[:1]:  # the evaluation: eager (a compile of 30 unrolled samples)
            steps = 3 if quick else (10 if what == "eval" else 50)
            result = run_anchor(regime, what, mode, devices.kind, steps, timeout=120 if quick else 300)
            runs[f"{row['key']}/{mode}"] = result
            ours = row["ms"][variant_name("float32", False)]
            if "ms" in result:
                result["ratios"] = {name: value / result["ms"] for name, value in row["ms"].items()}
                log(f"  torch {mode} {regime} {what}: {result['ms']:.3g} {row['unit']} (ours float32 / torch: "
                    f"{ours / result['ms']:.2f})")
            else:
                log(f"  torch {mode} {regime} {what}: failed ({result['error']})")
    note = "" if not quick else "quick: our rows use smaller memories than the anchor's, the ratios compare nothing"
    return {"note": note, "torch": info, "runs": runs}


# ----------------------------------------------------------------------------- placement
def state_variables(model) -> dict:
    """Every variable a model holds: Keras weights, optimizer slots, and the tf.Variables of its
    state (memory, counters) and of its evaluation caches, by name."""
    import tensorflow as tf

    found = {}

    def add(v):
        name = getattr(v, "path", None) or v.name
        found.setdefault(name, v)

    for v in list(model.variables) + list(model.optimizer.variables):
        add(v)

    def walk(obj, depth):
        for value in list(vars(obj).values()):
            if isinstance(value, (tf.Variable, tf.distribute.DistributedValues)):
                add(value)
            elif isinstance(value, tf.Module):
                for v in value.variables:
                    add(v)
            elif depth and type(value).__module__.startswith("gcl_tf") and hasattr(value, "__dict__"):
                walk(value, depth - 1)

    walk(model, 2)
    return found


def variable_devices(variable) -> list[str]:
    """The devices of a variable's copies (one per replica under a strategy)."""
    import tensorflow as tf

    value = getattr(variable, "value", variable) if not isinstance(variable, tf.Variable) else variable
    if isinstance(value, tf.distribute.DistributedValues):
        return [getattr(c, "device", "") for c in value.values]
    return [getattr(value, "device", "")]


def check_variables(model, devices: Devices, expected: list[str]) -> dict:
    """Every copy of every variable on a device under test, copy i on ``expected[i]``."""
    misplaced = []
    variables = state_variables(model)
    for name, variable in variables.items():
        placed = variable_devices(variable)
        want = expected if len(placed) == len(expected) else expected[:1] * len(placed)
        for got, where in zip(placed, want):
            if Devices.key(got) != Devices.key(where):
                misplaced.append(f"{name} on {got or '?'} (expected {where})")
    memory = [n for n in variables if "memory" in n]
    caches = [n for n in variables if "test_noise" in n or "context_" in n]
    return {"variables": len(variables), "memory_variables": memory, "cache_variables": caches, "misplaced": misplaced}


def function_graphs(run):
    """Run ``run()`` with TensorFlow's run metadata on; the partitioned graphs of every function
    instantiated meanwhile (the placement TensorFlow really ran)."""
    from tensorflow.python.eager import context  # (run metadata has no public TF2 API)

    context.enable_run_metadata()
    try:
        run()
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    return [fg.partition_graphs for fg in metadata.function_graphs]


def _source(name: str) -> str:
    return name.lstrip("^").split(":")[0]


def analyse_partitions(graphs, devices: Devices) -> dict:
    """Host transfers in partitioned graphs: every send from a device under test to another device
    (the host), those whose tensor is a variable's contents (a float variable read, passed on only
    by :data:`DATA_MOVEMENT_OPS`), and where the float random ops (the graph noise) ran."""
    sends, variable_sends, random_ops, nodes = [], [], {"device": 0, "host": [], "xla": 0}, 0
    for partitions in graphs:
        for graph in partitions:
            by_name = {n.name: n for n in graph.node}
            nodes += len(graph.node)
            consumers = {}
            for n in graph.node:
                for i in n.input:
                    if not i.startswith("^"):
                        consumers.setdefault(_source(i), []).append(n)
            tainted = set()
            frontier = [n for n in graph.node if n.op in VARIABLE_READ_OPS and n.attr["dtype"].type in FLOAT_TYPES]
            while frontier:
                node = frontier.pop()
                if node.name in tainted:
                    continue
                tainted.add(node.name)
                frontier += [c for c in consumers.get(node.name, []) if c.op in DATA_MOVEMENT_OPS or c.op == "_Send"]
            for n in graph.node:
                if n.op in XLA_OPS or (n.op.endswith("PartitionedCall") and "_XlaMustCompile" in n.attr
                                       and n.attr["_XlaMustCompile"].b):
                    random_ops["xla"] += devices.under_test(n.device)
                if n.op.startswith("StatelessRandom") and n.attr["dtype"].type in FLOAT_TYPES:
                    if devices.under_test(n.device):
                        random_ops["device"] += 1
                    else:
                        random_ops["host"].append(f"{n.name} ({n.op}) on {n.device}")
                if n.op != "_Send":
                    continue
                source, target = n.attr["send_device"].s.decode(), n.attr["recv_device"].s.decode()
                if not devices.under_test(source) or devices.under_test(target):
                    continue
                data = [_source(i) for i in n.input if not i.startswith("^")]
                producer = by_name.get(data[0]) if data else None
                entry = f"{n.name}: {producer.op if producer else '?'} {data[0] if data else ''} {source} -> {target}"
                sends.append(entry)
                if n.name in tainted:
                    variable_sends.append(entry)
    return {"functions": len(graphs), "nodes": nodes, "device_to_host_sends": sends,
            "variable_contents_to_host": variable_sends, "random_ops_on_device": random_ops["device"],
            "random_ops_on_host": random_ops["host"], "xla_computations_on_device": random_ops["xla"]}


def check_step(run_steps, count_traces, devices) -> dict:
    """Run the (not yet run) compiled step a few times under run metadata and analyse it;
    ``count_traces()``: how many times the step was traced."""
    analysis = analyse_partitions(function_graphs(run_steps), devices)
    analysis["traces"] = count_traces()
    return analysis


def placement_single(devices, quick, log) -> dict:
    """A float32 GCL model (MLP) built and stepped on the single device under test. The step's
    placement is read without XLA (see :data:`PLACEMENT_WITHOUT_XLA`)."""
    import tensorflow as tf

    from gcl_tf.benchmark import workloads
    from gcl_tf.devices import resolve_jit_compile

    memory = 20 if quick else 1000
    with tf.device(devices.single):
        model = workloads.make_model("gcl", (28, 28, 1), memory=memory)
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


# ----------------------------------------------------------------------------- end to end
def generated_cifar(path: str, per_class: int, test_per_class: int, seed: int = 0) -> None:
    """A CIFAR-10-shaped .npz (32x32x3 uint8, 10 classes): per class a smooth random prototype
    plus pixel noise, so that the classes can be learned."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(40, 215, size=(10, 4, 4, 3))
    prototypes = np.repeat(np.repeat(coarse, 8, axis=1), 8, axis=2)  # [10, 32, 32, 3]

    def split(n):
        labels = np.repeat(np.arange(10), n)
        rng.shuffle(labels)
        images = prototypes[labels] + rng.normal(0, 40, size=(len(labels), 32, 32, 3))
        return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.int64)

    (x_train, y_train), (x_test, y_test) = split(per_class), split(test_per_class)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


def end_to_end(devices, quick, folder, log) -> dict:
    """Split CIFAR-10-shaped (generated), GCL with the ConvNet (quick: the MLP), 5 tasks, MirroredStrategy on the
    replica devices, through gcl_tf.train.run; then the run's model, its variables and its
    compiled step (as Keras runs it: strategy.run of the per-replica step)."""
    import tensorflow as tf

    from gcl_tf import config as config_lib
    from gcl_tf import train
    from gcl_tf.distribute import distribute_batches

    replicas = len(devices.replicas)
    batch = replicas * -(-10 // replicas)  # 10, or the next multiple of the replicas
    eval_batch = replicas * -(-100 // replicas)
    per_task, memory = (20, 20) if quick else (200, 100)
    data = os.path.join(folder, "split_cifar10_generated.npz")
    generated_cifar(data, per_class=per_task // 2 + 10, test_per_class=20 if quick else 100)
    config = config_lib.resolve({
        "seed": 0,
        "benchmark": {"name": "split", "source": "npz", "dataset": "cifar10-shaped (generated)", "path": data,
                      "num_tasks": 5, "classes_per_task": 2, "samples_per_task": per_task,
                      "test_samples_per_task": 40 if quick else 200},
        "method": {"name": "gcl", "memory_size": memory, "test_graph_samples": 3 if quick else 30,
                   "context_temperature": 1.0, "target_temperature": 5.0},
        "model": {"backbone": "mlp" if quick else "convnet", "hidden_size": 32 if quick else 256},
        "train": {"optimizer": "adam", "learning_rate": 0.001, "batch_size": batch, "verbose": 0,
                  "log_every": 0, "checkpoint_every": 0, "distribute": "mirrored", "devices": devices.replicas},
        "eval": {"batch_size": eval_batch},
    })
    built = {}
    original = train.build_training_state

    def keep(*args, **kwargs):  # the run's model, for the checks after it
        built["state"] = original(*args, **kwargs)
        return built["state"]

    train.build_training_state = keep
    started = time.perf_counter()
    try:
        results = train.run(config, output_dir=os.path.join(folder, "run"), overwrite=True, verbose=0)
    finally:
        train.build_training_state = original
    seconds = time.perf_counter() - started
    model = built["state"][0]
    strategy = model.distribute_strategy
    log(f"  {replicas} replica(s) on {', '.join(devices.replicas)}: ACC {results['acc']:.1f} over 5 tasks "
        f"({results['train_steps']} steps) in {seconds:.0f} s; jit_compile {model.jit_compile}")

    x = np.load(data)["x_train"][: 4 * batch]
    y = np.load(data)["y_train"][: 4 * batch].astype(np.int32)
    stream = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
    batches = iter(distribute_batches(strategy, stream, batch))
    def per_replica(data):
        return model.train_step(data)

    @tf.autograph.experimental.do_not_convert
    def one_step_on_data(data):  # as Keras's train_function runs it: strategy.run in one tf.function
        return strategy.run(per_replica, args=(data,))

    step = tf.function(one_step_on_data, reduce_retracing=True)  # without XLA: PLACEMENT_WITHOUT_XLA

    def run():
        for _ in range(3):
            with strategy.scope():  # as Keras's fit calls it
                logs = step(next(batches))
            [float(v) for v in strategy.experimental_local_results(logs["loss"])]

    result = check_step(run, step.experimental_get_tracing_count, devices)
    result.update(check_variables(model, devices, devices.replicas))
    result.update(replicas=replicas, acc=float(results["acc"]), train_steps=int(results["train_steps"]),
                  train_seconds=float(results["train_seconds"]), eval_seconds=float(results["eval_seconds"]),
                  seconds=seconds, jit_compile=False, run_jit_compile=bool(model.jit_compile), batch_size=batch,
                  memory=memory, backbone=config.model.backbone)
    log(f"  mirrored step: {result['variables']} variables, {len(result['misplaced'])} misplaced; "
        f"{len(result['variable_contents_to_host'])} variable copies to the host; "
        f"{result['random_ops_on_device']} random ops on the device, {len(result['random_ops_on_host'])} on the host")
    return result


# ----------------------------------------------------------------------------- verdict and report
def failures(report) -> list[str]:
    out = []
    for where in ("placement", "end_to_end"):
        r = report[where]
        label = "single device" if where == "placement" else "mirrored run"
        if r["misplaced"]:
            out.append(f"{label}: {len(r['misplaced'])} variables off the device (first: {r['misplaced'][0]})")
        if not r["memory_variables"]:
            out.append(f"{label}: no memory variable found to check")
        if r["variable_contents_to_host"]:
            out.append(f"{label}: the step copies variable contents to the host "
                       f"({r['variable_contents_to_host'][0]})")
        on_device = r["random_ops_on_device"] or (r["jit_compile"] and r["xla_computations_on_device"])
        if r["random_ops_on_host"] or not on_device:
            first = r["random_ops_on_host"][:1] or "no random op"
            out.append(f"{label}: graph noise not drawn on the device ({first})")
        if r["traces"] != 1:
            out.append(f"{label}: the step traced {r['traces']} times")
        if r["functions"] == 0:
            out.append(f"{label}: no compiled function was observed")
    if not np.isfinite(report["end_to_end"]["acc"]):
        out.append("mirrored run: accuracy is not finite")
    for row in report["rows"]:
        retraced = {n: t for n, t in row["traces"].items() if t is not None and t != 1}
        if retraced:
            out.append(f"{row['what']}: retraced ({retraced})")
    return out


def verdict(rows, device_kind: str) -> dict:
    """Which jit_compile choice the rows support (XLA against no XLA, per precision measured),
    against the table ``auto`` uses on this device type."""
    from gcl_tf.devices import JIT_COMPILE_BY_DEVICE

    comparisons = []
    for row in rows:
        for policy in POLICY_NAMES:
            off, on = row["ms"].get(variant_name(policy, False)), row["ms"].get(variant_name(policy, True))
            if off is not None and on is not None:
                comparisons.append({"row": row["what"], "precision": POLICY_NAMES[policy], "xla_over_plain": on / off})
    float32 = [c for c in comparisons if c["precision"] == "float32"]
    steps = [c for c in float32 if "step" in c["row"]]
    evaluations = [c for c in float32 if "evaluation" in c["row"]]
    if not steps:
        return {"comparisons": comparisons, "supported": None, "auto": JIT_COMPILE_BY_DEVICE.get(device_kind),
                "text": "no float32 XLA variant measured: nothing to decide jit_compile on"}
    # Keras compiles the evaluation with the training step's jit_compile: both must gain.
    wins = sum(c["xla_over_plain"] < 1.0 for c in steps)
    evaluation_wins = all(c["xla_over_plain"] < 1.0 for c in evaluations)
    supported = wins * 2 > len(steps) and evaluation_wins
    auto = JIT_COMPILE_BY_DEVICE.get(device_kind, False)
    agrees = "confirms" if supported == auto else "overturns"
    evaluation_text = "".join(f", and {'faster' if c['xla_over_plain'] < 1.0 else 'slower'} on the evaluation "
                              f"({c['xla_over_plain']:.2f}x; Keras compiles it with the same setting)"
                              for c in evaluations)
    text = (f"XLA is faster on {wins} of {len(steps)} float32 training-step rows{evaluation_text}: the numbers "
            f"support jit_compile {'on' if supported else 'off'} on {device_kind}; train.jit_compile: auto picks "
            f"{'on' if auto else 'off'} there (gcl_tf/devices.py JIT_COMPILE_BY_DEVICE): this run {agrees} it")
    if supported != auto:
        text += f" (set JIT_COMPILE_BY_DEVICE[{device_kind!r}] = {supported})"
    return {"comparisons": comparisons, "supported": supported, "auto": auto, "agrees": supported == auto, "text": text}


def markdown(report) -> str:
    env = report["environment"]
    gpus = ", ".join(f"{g['name']} (compute {'.'.join(map(str, g['compute_capability']))})" for g in env["gpus"])
    lines = ["# GPU check", "", f"Command: `{report['command']}`", "",
             f"TensorFlow {env['tensorflow']}, Keras {env['keras']}; devices under test: {env['device_kind']} "
             f"({env['single_device']}; replicas {', '.join(env['replica_devices'])})" + (f"; {gpus}" if gpus else ""),
             f"Total {report['seconds']:.0f} s. Every figure of a row was timed in turns with the others "
             f"of its row in this process (medians); ratios are to float32 without XLA.", ""]
    names = [variant_name(p, x) for p, x in report["variants"]]
    lines += ["| row | unit | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for row in report["rows"]:
        cells = [f"{row['ms'][n]:.3g} ({row['ratio_to_float32'][n]:.2f}x)" for n in names]
        lines.append(f"| {row['what']} | {row['unit']} | " + " | ".join(cells) + " |")
    anchors = report["anchor"]
    lines.append("")
    if anchors.get("runs"):
        lines += [f"Plain PyTorch {anchors['torch']['version']} (gcl_tf/benchmark/anchors/torch_gcl_step.py), run "
                  "right after, on the same device; ours / torch (below 1: ours is faster):", "",
                  "| row | torch | torch time | " + " | ".join(f"ours {n} / torch" for n in names) + " |",
                  "|---|---|---|" + "---|" * len(names)]
        for row in report["rows"]:
            for mode in ("eager", "compile"):
                run = anchors["runs"].get(f"{row['key']}/{mode}")
                if run is None:
                    continue
                if "ms" not in run:
                    lines.append(f"| {row['what']} | {mode} | failed: {run['error']} |" + " |" * len(names))
                    continue
                lines.append(f"| {row['what']} | {mode} | {run['ms']:.3g} {row['unit']} | "
                             + " | ".join(f"{run['ratios'][n]:.3g}" for n in names) + " |")
        if anchors.get("note"):
            lines += ["", anchors["note"]]
    else:
        lines.append(anchors["note"])
    lines += ["", "## Placement", ""]
    for where, label in (("placement", f"GCL on {env['single_device']}"),
                         ("end_to_end", "continual run under MirroredStrategy")):
        r = report[where]
        lines.append(f"- {label}: {r['variables']} variables (memory: {len(r['memory_variables'])}, evaluation caches: "
                     f"{len(r['cache_variables'])}), {len(r['misplaced'])} off their device; the compiled step "
                     f"({r['functions']} function(s), {r['nodes']} placed nodes, read without XLA): "
                     f"{len(r['device_to_host_sends'])} device-to-host sends, "
                     f"{len(r['variable_contents_to_host'])} of variable contents; {r['random_ops_on_device']} "
                     f"random ops on the device, {len(r['random_ops_on_host'])} on the host, "
                     f"{r['xla_computations_on_device']} XLA computations on the device; traces {r['traces']}")
    e2e = report["end_to_end"]
    lines += [f"- the run: Split CIFAR-10-shaped (generated), GCL ({e2e['backbone']}), memory {e2e['memory']}, batch "
              f"{e2e['batch_size']} over {e2e['replicas']} replica(s), jit_compile {e2e['run_jit_compile']} (auto): "
              f"ACC {e2e['acc']:.1f}, {e2e['train_steps']} "
              f"steps, train {e2e['train_seconds']:.1f} s, eval {e2e['eval_seconds']:.1f} s", "",
              "## jit_compile", "", report["verdict"]["text"], ""]
    for c in report["verdict"]["comparisons"]:
        lines.append(f"- {c['row']}, {c['precision']}: XLA / plain {c['xla_over_plain']:.2f}")
    lines += ["", "## Result", ""]
    lines += ([f"- FAILED: {f}" for f in report["failures"]] or ["All placement assertions hold."])
    return "\n".join(lines) + "\n"


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
