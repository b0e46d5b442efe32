"""tf.distribute support: strategies from the config, global-batch input slicing, replica helpers.

Every replica keeps an identical copy of the episodic memory (its variables are ON_READ: each
replica updates its own copy, reads and checkpoints take the first replica's). Memory updates use
the *global* batch, gathered from all replicas, and stateless randomness keyed on the same
counters, so every replica applies exactly the same update. A global batch of ``B`` samples is
cut into ``R`` consecutive slices of ``B / R``, slice ``r`` going to replica ``r``, so a run on
``R`` replicas computes what a single-device run computes (up to float summation order).
"""
from __future__ import annotations

import tensorflow as tf

from gcl_tf.errors import ConfigError

_STRATEGIES: dict = {}


def make_strategy(train_config):
    """The configured strategy, or None for the default (single-device) one.

    One strategy per kind and device list per process, reused by later runs (a tuner or the
    benchmark suite runs many): TensorFlow numbers collective operations per process, and two
    live strategies over the same devices can mismatch them; MultiWorkerMirroredStrategy can
    only be created once.
    """
    kind = train_config.distribute
    if kind == "none":
        return None
    devices = tuple(train_config.devices) if (kind == "mirrored" and train_config.devices) else None
    if devices:
        check_devices(devices)
    key = (kind, devices)
    if key not in _STRATEGIES:
        if kind == "mirrored":
            _STRATEGIES[key] = tf.distribute.MirroredStrategy(devices=list(devices) if devices else None)
        elif kind == "multi_worker":
            _STRATEGIES[key] = tf.distribute.MultiWorkerMirroredStrategy()
        else:
            raise ValueError(f"unknown strategy {kind!r}")
    return _STRATEGIES[key]


def check_devices(devices) -> None:
    """A ConfigError naming the first of ``devices`` this process does not have (TensorFlow would
    place its replica on another device, where the replicas' collectives wait for each other forever)."""
    present = {(d.device_type, d.device_index) for d in
               (tf.DeviceSpec.from_string(x.name) for x in tf.config.list_logical_devices())}
    names = ", ".join(f"/{t.lower()}:{i}" for t, i in sorted(present))
    for name in devices:
        try:
            spec = tf.DeviceSpec.from_string(name)
        except ValueError:
            raise ConfigError(f"train.devices: {name!r} is not a device name; allowed: {names}") from None
        if (str(spec.device_type).upper(), spec.device_index or 0) not in present:
            raise ConfigError(f"train.devices: {name} is not a device of this process; allowed: {names} (several CPU "
                              "devices exist only where the process configured logical ones, docs/distributed.md)")


def is_chief(strategy) -> bool:
    """Whether this process is the chief of its cluster (one process: yes); only the chief writes."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and
                                     "chief" not in resolver.cluster_spec().as_dict())


def check_batch(strategy, batch_size: int, what: str) -> None:
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ConfigError(
            f"{what}: {batch_size} does not split evenly over {replicas} replicas; "
            f"allowed: a multiple of {replicas}"
        )


def distribute_batches(strategy, dataset: tf.data.Dataset, global_batch: int):
    """Distribute a dataset of global batches: replica r gets the r-th consecutive slice.

    Each worker builds the dataset, keeps the slices of its local replicas and hands them out
    round-robin, as ``distribute_datasets_from_function`` does.
    """
    replicas = strategy.num_replicas_in_sync
    check_batch(strategy, global_batch, "batch size")
    per_replica = global_batch // replicas

    def dataset_fn(context: tf.distribute.InputContext):
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local

        def slices(*batch):
            parts = [tf.reshape(t, [replicas, per_replica] + t.shape[1:].as_list()) for t in batch]  # static
            parts = [t[first:first + local] for t in parts]
            return tf.data.Dataset.from_tensor_slices(tuple(parts))

        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.with_options(options).flat_map(slices).prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(dataset_fn)


# ----------------------------------------------------------------------------- in a replica
def num_replicas() -> int:
    """Replicas in sync (1 outside a strategy). A Python int: usable for static shapes."""
    context = tf.distribute.get_replica_context()
    return 1 if context is None else int(context.num_replicas_in_sync)


def replica_id():
    """This replica's index in its sync group (0 outside a strategy)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tf.constant(0, tf.int32)
    return tf.cast(context.replica_id_in_sync_group, tf.int32)


def all_gather(value):
    """Concatenate ``value`` from every replica along axis 0 (identity on one replica)."""
    replicas = num_replicas()
    if replicas == 1:
        return value
    gathered = tf.distribute.get_replica_context().all_gather(value, axis=0)
    if value.shape.rank and value.shape[0] is not None:  # keep the static shape
        gathered = tf.ensure_shape(gathered, [replicas * value.shape[0]] + value.shape[1:].as_list())
    return gathered


def gather_in_order(*values):
    """``all_gather`` each value, one after the other: every replica must launch its collectives
    in the same order, so each gather waits for the previous one."""
    gathered = []
    for value in values:
        with tf.control_dependencies(gathered[-1:]):
            gathered.append(all_gather(value))
    return gathered


def all_mean(value):
    """Mean of ``value`` over replicas (identity on one replica)."""
    if num_replicas() == 1:
        return value
    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, value)


def all_sum(value):
    if num_replicas() == 1:
        return value
    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value)


def replica_rows(global_rows, local_rows: int):
    """Indices [local_rows] of this replica's rows within a global batch of ``global_rows``."""
    return replica_id() * local_rows + tf.range(local_rows)



def apply_if(condition, fn, *args) -> None:
    """``fn(*args)`` in a compiled step only when ``condition`` (a scalar bool, the same on every
    replica) holds; nothing at all otherwise (e.g. an optimizer update skipped whole: its step
    count does not advance). Under a strategy whose updates go through ``merge_call`` (a
    MirroredStrategy) the condition is taken in the cross-replica context and ``fn`` runs on every
    replica with its own ``args``, as Keras's LossScaleOptimizer skips a step: a ``tf.cond`` in a
    replica context must not hold a ``merge_call``."""

    def run_if(flag, run):
        tf.cond(flag, lambda: (run(), tf.constant(True))[1], lambda: tf.constant(False))

    if (not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context()
            or tf.__internal__.distribute.strategy_supports_no_merge_call()):
        run_if(condition, lambda: fn(*args))
        return

    def cross_replica(distribution, condition, *args):
        flag = distribution.experimental_local_results(condition)[0]  # the same on every replica
        run_if(flag, lambda: distribution.extended.call_for_each_replica(fn, args=args))

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(condition, *args))
