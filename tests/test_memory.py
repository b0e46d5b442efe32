"""Reservoir memory: capacity, the M/n keep probability, determinism, batch duplicates; ER never retraces."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from gcl_tf.memory import ReservoirMemory, reservoir_slots, sample_without_replacement


def seed_tensor(*values) -> tf.Tensor:
    return tf.constant(values, dtype=tf.int64)


def simulate(slots_fn, n: int, batch: int, capacity: int, run: int) -> np.ndarray:
    """Feed stream samples 0..n-1 in batches through ``slots_fn``; returns the memory [M] (-1: empty)."""
    memory = np.full(capacity, -1)
    for start in range(0, n, batch):
        slots = slots_fn(tf.constant(start, tf.int64), seed_tensor(run, start)).numpy()
        stored = slots[slots >= 0]
        assert len(np.unique(stored)) == len(stored)  # one sample per slot per batch
        assert np.all(stored < capacity)
        memory[stored] = np.arange(start, start + batch)[slots >= 0]
    return memory


@pytest.mark.slow
def test_reservoir_keeps_each_sample_with_probability_m_over_n():
    n, batch, capacity, runs = 40, 10, 8, 1000
    slots_fn = tf.function(lambda seen, seed: reservoir_slots(seen, batch, capacity, seed))
    counts = np.zeros(n)
    for run in range(runs):
        memory = simulate(slots_fn, n, batch, capacity, run)
        assert np.all(memory >= 0) and len(np.unique(memory)) == capacity  # full, M distinct samples
        counts[memory] += 1
    p = capacity / n
    expected, sd = runs * p, np.sqrt(runs * p * (1 - p))
    # Per sample: Binomial(runs, M/n); 5 standard deviations.
    assert np.all(np.abs(counts - expected) < 5 * sd), counts
    # All samples together: the counts are as even as a multinomial's (conservative: reservoir
    # draws are negatively correlated, which only lowers the statistic).
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < stats.chi2.ppf(1 - 1e-4, df=n - 1), chi2
    # Early, middle and late samples alike.
    thirds = [counts[:13].mean(), counts[13:27].mean(), counts[27:].mean()]
    assert np.ptp(thirds) < 3 * sd, thirds


@pytest.mark.slow
def test_reservoir_memory_add_in_tf_function_capacity_and_statistics():
    n, batch, capacity, seeds = 400, 10, 20, 6
    kept = []
    for seed in range(seeds):
        memory = ReservoirMemory(capacity, (2, 2, 1), seed=seed)
        add = tf.function(memory.add)
        for start in range(0, n, batch):
            ids = np.arange(start, start + batch)
            images = tf.constant(np.broadcast_to(ids[:, None, None, None], (batch, 2, 2, 1)), tf.float32)
            add(images, tf.constant(ids, tf.int32))
            filled = int(memory.num_filled.numpy())
            assert filled == min(start + batch, capacity)
            assert len(np.unique(memory.labels.numpy()[:filled])) == filled  # never more than M distinct
        assert int(memory.num_seen.numpy()) == n and int(memory.num_filled.numpy()) == capacity
        labels = memory.labels.numpy()
        np.testing.assert_array_equal(memory.images.numpy()[:, 0, 0, 0], labels)  # image and label together
        assert len(np.unique(labels)) == capacity and labels.min() >= 0 and labels.max() < n
        kept.append(labels)
    # Kept samples spread evenly over the stream: 10 blocks of 40 samples, 12 kept per block expected.
    blocks = np.bincount(np.concatenate(kept) // 40, minlength=10)
    expected = seeds * capacity / 10
    chi2 = np.sum((blocks - expected) ** 2 / expected)
    assert chi2 < stats.chi2.ppf(1 - 1e-3, df=9), blocks


def fill(memory: ReservoirMemory, n=60, batch=6, offset=0):
    for start in range(0, n, batch):
        ids = np.arange(start, start + batch) + offset
        memory.add(tf.constant(np.broadcast_to(ids[:, None], (batch, 3)), tf.float32), tf.constant(ids, tf.int32))
    return memory


def test_same_seed_gives_the_same_memory():
    a, b, c = (fill(ReservoirMemory(10, (3,), seed=s)) for s in (4, 4, 5))
    np.testing.assert_array_equal(a.labels.numpy(), b.labels.numpy())
    np.testing.assert_array_equal(a.images.numpy(), b.images.numpy())
    assert not np.array_equal(a.labels.numpy(), c.labels.numpy())
    first = ReservoirMemory(10, (3,), seed=4)
    slots = first.add(tf.zeros([6, 3]), tf.zeros([6], tf.int32)).numpy()
    np.testing.assert_array_equal(slots, np.arange(6))  # the fill phase takes slots in order


def sequential_reference(num_seen: int, batch: int, capacity: int, seed) -> dict:
    """Vitter's algorithm R one sample at a time, with the draws reservoir_slots makes.

    Returns {slot: position in the batch of the sample that ends in it}.
    """
    u = tf.random.stateless_uniform([batch], seed=seed, dtype=tf.float64).numpy()
    memory = {}
    for i in range(batch):
        n = num_seen + i + 1
        if n <= capacity:
            memory[n - 1] = i
        else:
            j = min(int(np.floor(u[i] * n)), n - 1)
            if j < capacity:
                memory[j] = i  # a later sample overwrites an earlier one
    return memory


def test_duplicate_slots_in_a_batch_resolve_as_sequential_insertion():
    capacity, batch = 3, 12
    duplicates = 0
    for num_seen in (0, 1, 2, 5, 30):
        for run in range(30):
            seed = seed_tensor(run, num_seen)
            slots = reservoir_slots(tf.constant(num_seen, tf.int64), batch, capacity, seed).numpy()
            stored = {int(s): i for i, s in enumerate(slots) if s >= 0}
            assert len(stored) == int(np.sum(slots >= 0))  # distinct slots
            reference = sequential_reference(num_seen, batch, capacity, seed)
            assert stored == reference, (num_seen, run, slots, reference)
            u = tf.random.stateless_uniform([batch], seed=seed, dtype=tf.float64).numpy()
            n = num_seen + np.arange(1, batch + 1)
            aimed = np.where(n <= capacity, n - 1, np.floor(u * n))
            aimed = aimed[aimed < capacity]
            duplicates += len(aimed) - len(np.unique(aimed))
    assert duplicates > 50  # the case was exercised


def test_sample_without_replacement_draws_distinct_filled_slots():
    valid = tf.constant([True, False, True, True, False, True, True, False, True, False])
    valid_index = set(np.flatnonzero(valid.numpy()))
    counts = np.zeros(10)
    for run in range(300):
        index, ok = sample_without_replacement(valid, 2, seed_tensor(run, 0))
        index, ok = index.numpy(), ok.numpy()
        assert ok.all() and len(set(index)) == 2 and set(index) <= valid_index
        counts[index] += 1
    # Uniform over the 6 valid slots: each drawn with probability 2/6.
    p = 2 / 6
    assert np.all(np.abs(counts[list(valid_index)] - 300 * p) < 5 * np.sqrt(300 * p * (1 - p))), counts
    index, ok = sample_without_replacement(valid, 8, seed_tensor(1, 1))
    index, ok = index.numpy(), ok.numpy()
    assert ok.sum() == 6 and set(index[ok]) == valid_index  # more draws than filled slots
    memory = ReservoirMemory(10, (3,), seed=0)
    fill(memory, n=6, batch=3)
    drawn = memory.sample(8, tf.constant(3, tf.int64))
    ok = drawn["ok"].numpy()
    assert ok.sum() == 6 and set(drawn["labels"].numpy()[ok]) == set(range(6))


def test_extra_fields_are_stored_and_drawn_with_their_samples_and_sample_returns_its_slots():
    """A field declared at construction (DER++'s logits) goes in with add and comes out of sample
    beside the image and label of the same sample; sample names the slots it drew, and another
    salt draws another batch from the same seed and counter."""
    memory = ReservoirMemory(12, (3,), seed=1, extra={"logits": ([4], tf.float32), "task": ([], "int32")})
    assert memory.logits.shape == (12, 4) and memory.task.dtype == tf.int32
    assert [v.name for v in memory.variables].count("memory/logits:0") == 1
    for start in range(0, 30, 5):  # 30 samples through 12 slots: the reservoir replaces some
        ids = np.arange(start, start + 5)
        slots = memory.add(tf.constant(np.repeat(ids[:, None], 3, axis=1), tf.float32), tf.constant(ids, tf.int32),
                           logits=tf.constant(ids[:, None] + np.arange(4)[None, :] / 10, tf.float32),
                           task=tf.constant(ids // 10, tf.int32)).numpy()
        kept = slots >= 0
        np.testing.assert_array_equal(memory.labels.numpy()[slots[kept]], ids[kept])
    labels = memory.labels.numpy()
    np.testing.assert_allclose(memory.logits.numpy(), labels[:, None] + np.arange(4)[None, :] / 10, rtol=1e-6)
    np.testing.assert_array_equal(memory.task.numpy(), labels // 10)
    drawn = memory.sample(5, tf.constant(7, tf.int64))
    slots = drawn["slots"].numpy()
    assert drawn["ok"].numpy().all() and len(set(slots)) == 5
    np.testing.assert_array_equal(drawn["labels"].numpy(), labels[slots])  # the slots it drew
    np.testing.assert_array_equal(drawn["images"].numpy()[:, 0], labels[slots])
    np.testing.assert_allclose(drawn["logits"].numpy(), memory.logits.numpy()[slots])
    np.testing.assert_array_equal(drawn["task"].numpy(), labels[slots] // 10)
    again = memory.sample(5, tf.constant(7, tf.int64))["slots"].numpy()
    other = memory.sample(5, tf.constant(7, tf.int64), salt=103)["slots"].numpy()
    np.testing.assert_array_equal(again, slots)  # stateless: the same seed, counter and salt
    assert not np.array_equal(other, slots)
    with pytest.raises(ValueError, match=r"memory fields: expected \['logits', 'task'\], got \['logits'\]"):
        memory.add(tf.zeros([2, 3]), tf.zeros([2], tf.int32), logits=tf.zeros([2, 4]))
    with pytest.raises(ValueError, match="memory field 'labels'"):
        ReservoirMemory(4, (3,), extra={"labels": ([1], tf.float32)})


def test_a_memory_without_extra_fields_keeps_its_variable_names():
    """The checkpoints of runs made before extra fields existed restore: the same variables."""
    memory = ReservoirMemory(4, (3,))
    assert sorted(v.name for v in memory.variables) == ["memory/images:0", "memory/labels:0", "memory/num_filled:0",
                                                        "memory/num_seen:0"]


REPLICA_SLICES = """
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from gcl_tf.memory import ReservoirMemory, replay_batch
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    memory = ReservoirMemory(10, (2,), seed=3, extra={"logits": ([3], tf.float32)})
ids = np.arange(8)
memory.add(tf.constant(np.repeat(ids[:, None], 2, axis=1), tf.float32), tf.constant(ids, tf.int32),
           logits=tf.constant(np.repeat(ids[:, None], 3, axis=1), tf.float32))
whole = replay_batch(memory, 6, tf.constant(5, tf.int64))  # one device: the whole draw
parts = strategy.run(tf.function(lambda: replay_batch(memory, 6, tf.constant(5, tf.int64))))
out = {"whole": {k: v.numpy().tolist() for k, v in whole.items()},
       "parts": [{k: strategy.experimental_local_results(v)[r].numpy().tolist() for k, v in parts.items()}
                 for r in range(2)]}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_replay_batch_on_two_replicas_is_the_one_device_batch_cut_in_two(tmp_path):
    """Each replica replays its consecutive half of the batch one device draws (all fields)."""
    from conftest import run_script

    out = run_script(tmp_path / "replicas.py", REPLICA_SLICES, tag="RESULT")
    whole, parts = out["whole"], out["parts"]
    assert set(whole) == {"slots", "ok", "images", "labels", "logits"}
    assert sum(whole["ok"]) == 6 and len(set(whole["slots"])) == 6
    for field, values in whole.items():
        assert parts[0][field] + parts[1][field] == values, field


def test_er_train_step_does_not_retrace_across_steps_or_tasks(make_config, tmp_path, monkeypatch):
    from gcl_tf import methods, train
    from gcl_tf.methods import er

    class CountingER(er.ER):
        traces = 0
        at_task_begin = []

        def train_step(self, data):
            CountingER.traces += 1  # Python runs only while tracing
            return super().train_step(data)

        def on_task_begin(self, task_index, classes):
            CountingER.at_task_begin.append(CountingER.traces)
            super().on_task_begin(task_index, classes)

    monkeypatch.setattr(methods, "method_class", lambda name: CountingER)
    config = make_config({"method": {"name": "er", "memory_size": 30},
                          "benchmark": {"num_tasks": 3, "samples_per_task": 60},
                          "train": {"log_every": 2}})
    results = train.run(config, output_dir=str(tmp_path))
    first_task = CountingER.at_task_begin[1]
    assert 1 <= first_task <= 2  # traced when the first task starts ...
    assert CountingER.at_task_begin == [0, first_task, first_task]  # ... and never again
    assert CountingER.traces == first_task
    assert results["train_steps"] == 3 * 6


def salt_positions() -> dict:
    """{function name: index of its positional salt argument in a call} for every function that
    takes a stream's salt (a method's ``self`` not counted)."""
    import inspect

    from gcl_tf.data.rng import task_rng
    from gcl_tf.memory.reservoir import replay_batch
    from gcl_tf.memory.state import step_seed

    positions = {}
    for name, function, skip in (("step_seed", step_seed, 0), ("task_rng", task_rng, 0),
                                 ("replay_batch", replay_batch, 0), ("sample", ReservoirMemory.sample, 1)):
        positions[name] = list(inspect.signature(function).parameters).index("salt") - skip
    return positions


def salt_mistakes(source: str, positions: dict) -> list:
    """Where ``source`` numbers a random stream itself, parsed (``ast``), so that a call is found
    whatever its arguments hold: a salt argument (positional, or ``salt=`` of any call) that is
    not a name of gcl_tf/salts.py (``salts.NAME``) or a salt passed on (the name ``salt``), and a
    ``SALT...`` constant of its own. Returns ``["line N: code"]``."""
    import ast

    def allowed(node) -> bool:
        if isinstance(node, ast.Name):
            return node.id == "salt"
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "salts"
                and node.attr.isupper())

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            given = [k.value for k in node.keywords if k.arg == "salt"]
            if name in positions and len(node.args) > positions[name]:
                given.append(node.args[positions[name]])
            if any(not allowed(arg) for arg in given):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any(n.lstrip("_").startswith("SALT") for n in names):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_salt_check_finds_every_call_that_numbers_a_stream_itself():
    """salt_mistakes parses the source: calls with nested parentheses, several lines or a salt
    keyword are found; the table's names and a salt passed on are not mistakes."""
    positions = salt_positions()
    assert positions == {"step_seed": 2, "task_rng": 2, "replay_batch": 3, "sample": 2}
    mistakes = [
        "seed = step_seed(0, tf.cast(seed, tf.int64), 7)",
        "rng = task_rng(int(self.seed), len(tasks), 5)",
        "rng = task_rng(self.seed, t,\n               (2))",
        "drawn = self.memory.sample(k, counter + tf.cast(j, tf.int64), salt=103)",
        "batch = replay_batch(self.memory, size, self.step_counter, salts.REPLAY + 1)",
        "SALT = 7",
        "_SALT_OF_MINE: int = 7",
    ]
    for source in mistakes:
        assert len(salt_mistakes(source, positions)) == 1, source
    fine = ("seed = step_seed(0, tf.cast(seed, tf.int64), salts.SERVING)\n"
            "drawn = memory.sample(size, counter, salt)\n"
            "batch = replay_batch(self.memory, size, self.step_counter)\n"
            "x = tfd.Logistic(loc=0.0, scale=1.0).sample(shape, seed=seed)\n")
    assert salt_mistakes(fine, positions) == []


def test_every_random_stream_takes_its_salt_from_the_one_table():
    """gcl_tf/salts.py: distinct values, and no module of the package numbers a stream itself
    (a salt outside the table, or a SALT constant of its own: salt_mistakes)."""
    import os

    from gcl_tf import salts

    values = {name: value for name, value in vars(salts).items() if name.isupper()}
    assert len(values) >= 13 and len(set(values.values())) == len(values), values
    positions = salt_positions()
    package = os.path.dirname(salts.__file__)
    for folder, _, files in os.walk(package):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != salts.__file__:
                with open(path, encoding="utf-8") as handle:
                    assert salt_mistakes(handle.read(), positions) == [], os.path.relpath(path, package)
