"""Continual protocols: permuted, rotated, split; multi-head masks; validation; determinism."""
from __future__ import annotations

import numpy as np
import pytest

from gcl_tf.data import ContinualBenchmark
from gcl_tf.errors import ConfigError

from conftest import ramp_image, random_split, write_idx


def bench(config, load_test=True):
    return ContinualBenchmark(config.benchmark, config.seed, load_test=load_test)


def as_set(images) -> list[bytes]:
    return sorted(image.tobytes() for image in images)


def read_permutation(image) -> np.ndarray:
    """The pixel permutation that produced ``image`` from the ramp image (pixel p = p * step)."""
    flat = image.reshape(-1).astype(np.int64)
    step = 256 // flat.size
    assert np.all(flat % step == 0)
    return flat // step


def find_ramp(images, shape):
    """The image among ``images`` holding exactly the ramp's pixel values (in some order)."""
    ramp_values = np.sort(ramp_image(shape).reshape(-1))
    hits = [im for im in images if np.array_equal(np.sort(im.reshape(-1)), ramp_values)]
    assert len(hits) == 1
    return hits[0]


def test_permuted_fixed_within_a_task_and_different_across_tasks(npz_config, npz_file):
    _, (x_train, _, x_test, _) = npz_file
    benchmark = bench(npz_config({"num_tasks": 4}))
    permutations = []
    for task in benchmark.tasks:
        # All training and test samples of the task (samples_per_task: null).
        assert len(task.train_data) == len(x_train) and len(task.test_data) == len(x_test)
        # Read the permutation back from the ramp image, in the test split and in the training split.
        from_test = read_permutation(task.test_data.images[0])
        from_train = read_permutation(find_ramp(task.train_data.images, (8, 8, 1)))
        np.testing.assert_array_equal(from_test, from_train)
        assert sorted(from_test) == list(range(64))  # a permutation of the pixels
        np.testing.assert_array_equal(from_test, task.transform["permutation"])
        # Every image of the task is its original with that one permutation applied.
        permute = lambda images: images.reshape(len(images), -1)[:, from_test].reshape(images.shape)
        np.testing.assert_array_equal(task.test_data.images[..., 0], permute(x_test))
        assert as_set(task.train_data.images[..., 0]) == as_set(permute(x_train))
        permutations.append(from_test)
    for a in range(len(permutations)):
        for b in range(a):
            assert not np.array_equal(permutations[a], permutations[b])


def pil_rotate(image, angle):
    """GEM's mnist_rotations.py: Image.fromarray(x, mode='L').rotate(angle), PIL's default resampling."""
    from PIL import Image

    return np.asarray(Image.fromarray(image).rotate(angle))


def test_rotated_matches_gems_pil_rotation_and_differs_across_tasks(npz_config, npz_file):
    _, (x_train, _, x_test, _) = npz_file
    benchmark = bench(npz_config({"name": "rotated", "num_tasks": 3, "max_rotation": 180.0}))
    angles = []
    for task in benchmark.tasks:
        angle = task.transform["rotation_degrees"]
        assert 0.0 <= angle < 180.0
        expected_test = np.stack([pil_rotate(img, angle) for img in x_test])
        np.testing.assert_array_equal(task.test_data.images[..., 0], expected_test)
        assert as_set(task.train_data.images[..., 0]) == as_set([pil_rotate(img, angle) for img in x_train])
        angles.append(angle)
    assert len(set(angles)) == 3
    assert not np.array_equal(benchmark.tasks[0].test_data.images, benchmark.tasks[1].test_data.images)


def test_rotation_resamples_nearest_like_pil():
    """Nearest-neighbour resampling: a rotated binary image stays binary (bilinear would blend)."""
    from gcl_tf.data.protocols import rotate_images

    images = (np.random.default_rng(0).random((4, 12, 12, 1)) < 0.5).astype(np.uint8) * 255
    rotated = rotate_images(images, 33.0)
    assert set(np.unique(rotated)) <= {0, 255}
    np.testing.assert_array_equal(rotated[..., 0], np.stack([pil_rotate(img[..., 0], 33.0) for img in images]))


def test_rotation_angles_rise_with_the_task_as_gem_builds_them(make_config):
    """Task t's angle lies in [t R / T, (t + 1) R / T) (GEM's mnist_rotations.py, --min_rot 0)."""
    benchmark = bench(make_config({"benchmark": {"name": "rotated", "num_tasks": 20, "samples_per_task": 10,
                                                 "test_samples_per_task": 5, "max_rotation": 180.0}}))
    angles = np.array([task.transform["rotation_degrees"] for task in benchmark.tasks])
    for t, angle in enumerate(angles):
        assert t * 9.0 <= angle < (t + 1) * 9.0
    assert np.all(np.diff(angles) > 0) and len(np.unique(angles)) == 20


def test_rotation_angles_stay_below_max_rotation(make_config):
    benchmark = bench(make_config({"benchmark": {"name": "rotated", "num_tasks": 20, "samples_per_task": 10,
                                                 "test_samples_per_task": 5, "max_rotation": 30.0}}))
    angles = np.array([task.transform["rotation_degrees"] for task in benchmark.tasks])
    assert np.all((angles >= 0.0) & (angles < 30.0))
    assert len(np.unique(angles)) == 20 and angles.max() - angles.min() > 10.0


def test_rotation_by_90_degrees_is_exact():
    from gcl_tf.data.protocols import rotate_images

    images = np.random.default_rng(0).integers(0, 256, size=(3, 5, 5, 2), dtype=np.uint8)
    np.testing.assert_array_equal(rotate_images(images, 90.0), np.rot90(images, k=1, axes=(1, 2)))


def test_split_consecutive_classes_per_task(npz_config, npz_file):
    _, (_, y_train, _, y_test) = npz_file
    benchmark = bench(npz_config({"name": "split", "num_tasks": 5, "classes_per_task": 2}))
    assert benchmark.num_tasks == 5
    for t, task in enumerate(benchmark.tasks):
        classes = [2 * t, 2 * t + 1]
        assert list(task.classes) == classes
        assert set(np.unique(task.train_data.labels)) == set(classes)
        assert set(np.unique(task.test_data.labels)) == set(classes)
        # All of the task's samples (samples_per_task: null), and nothing else.
        assert len(task.train_data) == np.isin(y_train, classes).sum()
        assert len(task.test_data) == np.isin(y_test, classes).sum()
    with pytest.raises(ConfigError, match="classes_per_task"):
        bench(npz_config({"name": "split", "num_tasks": 4, "classes_per_task": 3}))


def test_multi_head_masks(npz_config):
    multi = bench(npz_config({"name": "split", "num_tasks": 3, "classes_per_task": 3, "multi_head": True}))
    for task in multi.tasks:
        mask = multi.class_mask(task)
        assert mask.dtype == bool and mask.shape == (10,)
        np.testing.assert_array_equal(np.flatnonzero(mask), task.classes)
    single = bench(npz_config({"name": "split", "num_tasks": 3, "classes_per_task": 3}))
    for task in single.tasks:
        assert single.class_mask(task).all() and single.class_mask(task).shape == (10,)
    permuted = bench(npz_config({"num_tasks": 2}))
    assert permuted.class_mask(permuted.tasks[1]).all()


def test_validation_split_is_carved_from_training_samples(npz_config, npz_file):
    _, (x_train, _, _, _) = npz_file
    benchmark = bench(npz_config({"name": "split", "num_tasks": 2, "classes_per_task": 5,
                                  "samples_per_task": 80, "validation_fraction": 0.25}))
    for task in benchmark.tasks:
        assert len(task.validation_data) == 20 and len(task.train_data) == 60
        train, val = set(as_set(task.train_data.images)), set(as_set(task.validation_data.images))
        assert not train & val  # disjoint
        originals = set(as_set(x_train[..., None]))
        assert train <= originals and val <= originals  # both from the training split
        assert set(np.unique(task.validation_data.labels)) <= set(task.classes)
        assert task.eval_data("validation") is task.validation_data


def test_test_split_never_loaded_without_load_test(tmp_path, make_config):
    folder = tmp_path / "idx"
    folder.mkdir()
    images, labels = random_split(50, (4, 4), 5, seed=0)
    write_idx(folder / "train-images-idx3-ubyte", images)
    write_idx(folder / "train-labels-idx1-ubyte", labels)
    # No t10k-* files: reading the test split would fail.
    config = make_config({"benchmark": {"source": "idx", "path": str(folder), "samples_per_task": 20,
                                        "validation_fraction": 0.2}},
                         ["eval.split=validation"])
    benchmark = bench(config, load_test=False)
    assert "test" not in benchmark.source._cache
    for task in benchmark.tasks:
        assert task.test_data is None and len(task.validation_data) == 4 and len(task.train_data) == 16
    with pytest.raises(ValueError):
        benchmark.tasks[0].eval_data("test")


def test_same_seed_same_tasks_different_seed_different(make_config):
    def arrays(seed, name):
        config = make_config({"seed": seed, "benchmark": {"name": name, "num_tasks": 2, "samples_per_task": 50,
                                                          "validation_fraction": 0.2}})
        tasks = bench(config).tasks
        return [np.concatenate([t.train_data.images.ravel(), t.train_data.labels, t.validation_data.images.ravel(),
                                t.test_data.images.ravel()]) for t in tasks]

    for name in ("permuted", "rotated", "split"):
        a, b, c = arrays(0, name), arrays(0, name), arrays(1, name)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
        assert any(not np.array_equal(x, z) for x, z in zip(a, c))


def test_samples_per_task_and_test_samples_per_task(make_config):
    config = make_config({"benchmark": {"name": "permuted", "num_tasks": 3, "samples_per_task": 37,
                                        "test_samples_per_task": 11}})
    benchmark = bench(config)
    for task in benchmark.tasks:
        assert len(task.train_data) == 37 and len(task.test_data) == 11
        assert task.train_data.images.shape == (37, 8, 8, 1)
    # Different tasks draw different samples.
    assert not np.array_equal(benchmark.tasks[0].train_data.labels, benchmark.tasks[1].train_data.labels)
    with pytest.raises(ConfigError, match="samples_per_task"):
        bench(make_config({"benchmark": {"samples_per_task": 5000}}))
