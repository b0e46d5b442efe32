"""The GPU check's placement assertions: where every variable of a model lives, what the
compiled step's partitioned graphs (from TensorFlow's run metadata) send to the host and where
they draw the graph noise; and a short end-to-end continual run under MirroredStrategy
(generated CIFAR-10-shaped images) whose step is checked so. The models and the run's config are
the method's speed checks' (gcl_tf/speed/)."""
from __future__ import annotations

import os
import time

import numpy as np

from gcl_tf.benchmark.gpu_devices import Devices

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
# The steps checked here are traced without XLA: TensorFlow records no placed graph for a function
# compiled whole by XLA (jit_compile=True), which is one XLA computation on one device. Without
# XLA every op's placement is recorded; under XLA those ops run inside one computation on the
# device the step was placed on.


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


def mirrored_run(devices, settings: dict, data: str, folder, log) -> dict:
    """The run of config ``settings`` (a mapping, resolved here; its images at ``data``, an .npz)
    through gcl_tf.train.run, in ``folder``/run; then the run's model, its variables and its
    compiled step (as Keras runs it: strategy.run of the per-replica step)."""
    import tensorflow as tf

    from gcl_tf import config as config_lib
    from gcl_tf import train
    from gcl_tf.distribute import distribute_batches

    config = config_lib.resolve(settings)
    replicas, batch = len(devices.replicas), config.train.batch_size
    started = time.perf_counter()
    results, model = train.train_model(config, output_dir=os.path.join(folder, "run"), overwrite=True, verbose=0)
    seconds = time.perf_counter() - started
    strategy = model.distribute_strategy
    log(f"  {replicas} replica(s) on {', '.join(devices.replicas)}: ACC {results['acc']:.1f} over "
        f"{config.benchmark.num_tasks} tasks ({results['train_steps']} steps) in {seconds:.0f} s; "
        f"jit_compile {model.jit_compile}")

    x = np.load(data)["x_train"][: 4 * batch]
    y = np.load(data)["y_train"][: 4 * batch].astype(np.int32)
    stream = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
    batches = iter(distribute_batches(strategy, stream, batch))
    def per_replica(data):
        return model.train_step(data)

    @tf.autograph.experimental.do_not_convert
    def one_step_on_data(data):  # as Keras's train_function runs it: strategy.run in one tf.function
        return strategy.run(per_replica, args=(data,))

    step = tf.function(one_step_on_data, reduce_retracing=True)  # without XLA (see XLA_OPS)

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
                  memory=config.method.memory_size, backbone=config.model.backbone)
    log(f"  mirrored step: {result['variables']} variables, {len(result['misplaced'])} misplaced; "
        f"{len(result['variable_contents_to_host'])} variable copies to the host; "
        f"{result['random_ops_on_device']} random ops on the device, {len(result['random_ops_on_host'])} on the host")
    return result
