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
    images, labels, ok = memory.sample(8, tf.constant(3, tf.int64))
    assert ok.numpy().sum() == 6 and set(labels.numpy()[ok.numpy()]) == set(range(6))


def test_er_train_step_does_not_retrace_across_steps_or_tasks(make_config, tmp_path, monkeypatch):
    from gcl_tf import methods, train
    from gcl_tf.methods import er

    class CountingER(er.Method):
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
