"""Every config in configs/ loads and validates with every method of its presets, and the paper
benchmarks' configs carry the paper's settings (appendices "Experiment Setup", "Hyper-parameters")."""
from __future__ import annotations

import dataclasses
import glob
import json
import os

import pytest
import yaml

from gcl_tf import methods
from gcl_tf.config import load_config
from gcl_tf.config_dicts import flat_keys

from conftest import REPO

CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))
CASES = [(os.path.basename(path)[:-5], method)
         for path in CONFIGS for method in (yaml.safe_load(open(path, encoding="utf-8")).get("presets") or {})]
# every config with every registered method: its preset, else the config's settings and its defaults
ALL_METHODS = [(os.path.basename(path)[:-5], method) for path in CONFIGS for method in methods.names()]


def load(name, method, *overrides):
    return load_config(os.path.join(REPO, "configs", name + ".yaml"), [f"method.name={method}", *overrides])


def test_every_config_has_presets():
    assert len(CONFIGS) >= 9
    names = {name for name, _ in CASES}
    assert names == {os.path.basename(p)[:-5] for p in CONFIGS}


@pytest.mark.parametrize("name, method", ALL_METHODS)
def test_config_loads_and_validates_with_every_method(name, method):
    """Every config runs every method: the method's keys are its preset's where the file has one
    and the method's own defaults elsewhere (nothing of another method's preset leaks in), and
    every benchmark is an online stream of batches of 10."""
    config = load(name, method)
    raw = yaml.safe_load(open(os.path.join(REPO, "configs", name + ".yaml"), encoding="utf-8"))
    preset = ((raw.get("presets") or {}).get(method) or {}).get("method") or {}
    expected = {**dataclasses.asdict(methods.config_class(method)()), **(raw.get("method") or {}), **preset,
                "name": method}
    assert dataclasses.asdict(config.method) == expected
    assert config.train.batch_size == 10


@pytest.mark.parametrize("name", ["quickstart", "permuted_fashion_mnist", "rotated_fashion_mnist",
                                  "split_fashion_mnist", "split_cifar10"])
def test_the_replay_baselines_have_presets_with_ers_memory_and_backbone(name):
    """DER++ and ER-ACE next to ER: the same memory and backbone; ER-ACE also ER's optimizer."""
    er = load(name, "er")
    for method in ("derpp", "er_ace"):
        config = load(name, method)
        assert config.method.memory_size == er.method.memory_size, (name, method)
        assert config.model == er.model, (name, method)
    er_ace = load(name, "er_ace")
    assert (er_ace.train.optimizer, er_ace.train.learning_rate) == (er.train.optimizer, er.train.learning_rate)


@pytest.mark.parametrize("name", [os.path.basename(p)[:-5] for p in CONFIGS])
def test_mir_has_a_preset_with_ers_memory_trunk_and_learning_rate(name):
    """MIR next to ER wherever ER is: what differs is only which samples it replays."""
    er, mir = load(name, "er"), load(name, "mir")
    assert "mir" in {m for n, m in CASES if n == name}
    assert mir.method.memory_size == er.method.memory_size and mir.model == er.model
    assert (mir.train.optimizer, mir.train.learning_rate) == (er.train.optimizer, er.train.learning_rate)
    assert mir.method.candidates == 50  # the authors' 50
    assert mir.method.replay_batch_size == er.method.replay_batch_size  # k: the batch (None), or the protocol's


GCL_PRESETS = [name for name, method in CASES if method == "gcl"]
SEARCHES = sorted(glob.glob(os.path.join(REPO, "docs", "results", "search", "*", "best_config.yaml")))


#: The presets that take the library's head and loss, with the issue that chose them on validation.
LIBRARY_HEAD = {"split_cifar10_ocl": (True, "present")}  # issue 69, docs/gcl_today.md


@pytest.mark.parametrize("name", GCL_PRESETS)
def test_every_shipped_gcl_preset_names_its_head_and_loss(name):
    """The constructor's defaults became own_latent: true, target_loss: present (issue 33); every
    shipped preset names its values in its file, the paper's false / all (the paper's benchmarks,
    the quickstart) or, where validation chose them (LIBRARY_HEAD), the library's, so that every
    committed result still means the model it ran."""
    with open(os.path.join(REPO, "configs", name + ".yaml"), encoding="utf-8") as handle:
        preset = yaml.safe_load(handle)["presets"]["gcl"]
    method = preset.get("method", {})
    expected = LIBRARY_HEAD.get(name, (False, "all"))
    assert (method.get("own_latent"), method.get("target_loss")) == expected, name
    loaded = load(name, "gcl").method
    assert (loaded.own_latent, loaded.target_loss) == expected


@pytest.mark.parametrize("path", [p for p in SEARCHES if "gcl" in os.path.basename(os.path.dirname(p))],
                         ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_every_shipped_gcl_search_result_names_the_head_it_searched(path):
    """A search's best_config.yaml, given as --config, trains the paper's head it searched; its file says so."""
    with open(path, encoding="utf-8") as handle:
        method = yaml.safe_load(handle)["method"]
    assert method["name"] == "gcl" and (method["own_latent"], method["target_loss"]) == (False, "all")


# benchmark -> (protocol, dataset, source, tasks, memory, epochs, multi_head)
PAPER = {
    "permuted_mnist": ("permuted", "mnist", "tfds", 20, 1000, 1, False),
    "rotated_mnist": ("rotated", "mnist", "tfds", 20, 1000, 1, False),
    "split_svhn": ("split", "svhn_cropped", "tfds", 5, 250, 1, False),
    "split_cifar10": ("split", "cifar10", "tfds", 5, 250, 1, False),
    "split_cifar100": ("split", "cifar100", "tfds", 20, 500, 10, True),
    "split_miniimagenet": ("split", "miniimagenet", "folder", 20, 500, 10, True),
    "permuted_fashion_mnist": ("permuted", "fashion_mnist", "idx", 20, 1000, 1, False),
    "rotated_fashion_mnist": ("rotated", "fashion_mnist", "idx", 20, 1000, 1, False),
}
MNIST_LIKE = {"permuted_mnist", "rotated_mnist", "permuted_fashion_mnist", "rotated_fashion_mnist"}
# GCL presets that are the best trial of a search (issues 22, 32) (docs/gcl/searched_presets.md)
SEARCHED_GCL = {"permuted_fashion_mnist": "permuted-gcl-20tasks", "rotated_fashion_mnist": "rotated-gcl-20tasks",
                "permuted_mnist": "permuted-mnist-gcl", "rotated_mnist": "rotated-mnist-gcl"}
# Our Fashion-MNIST benchmarks carry GCL values tuned on validation splits, not the paper's.


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_settings(name):
    protocol, dataset, source, tasks, memory, epochs, multi_head = PAPER[name]
    methods = [m for n, m in CASES if n == name]
    assert {"finetune", "er", "gcl"} <= set(methods)
    for method in methods:
        c = load(name, method)
        b = c.benchmark
        assert (b.name, b.dataset, b.source, b.num_tasks) == (protocol, dataset, source, tasks)
        assert (c.train.epochs, b.multi_head) == (epochs, multi_head)
        assert b.augment == ("none" if name in MNIST_LIKE else "flip")  # (CIFAR100, MiniImageNet: ours)
        if protocol == "split":
            assert b.classes_per_task == (2 if tasks == 5 else 5)
        if name in MNIST_LIKE:
            assert b.samples_per_task == 1000
        if hasattr(c.method, "memory_size"):
            assert c.method.memory_size == memory, method
        if method == "gcl" and name in SEARCHED_GCL:  # issue 22: the search's best trial (docs/gcl/searched_presets.md)
            with open(os.path.join(REPO, "docs", "results", "search", SEARCHED_GCL[name], "best.json")) as handle:
                best = json.load(handle)["values"]
            shipped = flat_keys(c.to_dict())
            assert best and all(shipped[key] == value for key, value in best.items()), best
            assert (c.model.backbone, c.model.hidden_size, c.train.optimizer) == ("mlp", 256, "adam")
        elif method == "gcl":
            assert (c.train.optimizer, c.train.learning_rate) == ("adam", pytest.approx(1e-3))
            # the paper's values everywhere; they learn through our extensions (the defaults)
            assert (c.method.target_temperature, c.method.context_lambda) == (5, 1)
            # our extensions for the MLP; the ConvNet presets are the paper's GCL exactly (docs/gcl/extensions.md)
            extensions = (1.0, 1.0) if name in MNIST_LIKE else (None, None)
            assert (c.method.regularize_below, c.method.kernel_width) == extensions
            if name in MNIST_LIKE:
                assert (c.model.backbone, c.model.hidden_size, c.method.context_temperature) == ("mlp", 256, 0.1)
            else:
                assert (c.model.backbone, c.method.context_temperature, c.method.graph_lambda) == ("convnet", 1.0, 50)
        elif name in MNIST_LIKE:
            assert (c.model.backbone, c.model.hidden_size) == ("mlp", 400)
        else:
            assert (c.model.backbone, c.model.filters) == ("resnet18", 20)
    if name.startswith("rotated"):
        assert load(name, "gcl").benchmark.max_rotation == 180


def test_fashion_mnist_configs_read_debians_idx_files():
    for name in ("permuted_fashion_mnist", "rotated_fashion_mnist"):
        b = load(name, "er").benchmark
        assert b.path == "/usr/share/datasets/fashion-mnist" and b.test_samples_per_task == 1000


def test_miniimagenet_reads_84x84_images_from_a_folder_the_user_sets():
    b = load("split_miniimagenet", "er").benchmark
    assert (b.source, b.image_size, b.color_mode) == ("folder", 84, "rgb")
    assert "placeholder" in open(os.path.join(REPO, "configs", "split_miniimagenet.yaml"), encoding="utf-8").read()
    assert load("split_miniimagenet", "er", "benchmark.path=/data/mini").benchmark.path == "/data/mini"


def test_the_configs_say_whose_flip_and_which_rotation_protocol():
    """The authors' released loaders flip Split CIFAR10 and SVHN only: the flip of CIFAR100 and
    MiniImageNet is called ours; the Rotated headers describe GEM's rising angles."""
    def text(name):
        with open(os.path.join(REPO, "configs", name + ".yaml"), encoding="utf-8") as handle:
            return handle.read()

    for name in ("split_cifar10", "split_svhn"):
        assert "The authors' loaders flip training images" in text(name)
    for name in ("split_cifar100", "split_miniimagenet"):
        assert "Our extrapolation: the authors' released loaders flip the training images of Split CIFAR10" \
            in text(name) and "The authors' loaders flip" not in text(name)
    for name in ("rotated_mnist", "rotated_fashion_mnist"):
        header = text(name).split("\nseed:")[0]
        assert "[t * 180 / 20, (t + 1) * 180 / 20)" in header and "[0, 180)" not in header, name



# ----------------------------------------------------------------------------- issue 52: adopted presets
ADOPT = os.path.join(REPO, "docs", "results", "search", "adopt")
CHECKED = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ADOPT, "*", "adopt.json")))


@pytest.mark.parametrize("folder", CHECKED)
def test_each_checked_preset_is_what_its_adoption_check_decided(folder):
    """A searched preset stays only when `python -m gcl_tf.tune.adopt` said adopt; otherwise the
    config ships the paper's values the check ran against (docs/tuning/adopting.md)."""
    report = json.load(open(os.path.join(ADOPT, folder, "adopt.json")))
    config = load_config(os.path.join(REPO, report["config"]), [f"method.name={report['method']}"])
    shipped = flat_keys(config.to_dict())
    paper = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in report["paper"])}
    searched_run = json.load(open(os.path.join(ADOPT, folder, "own-searched-seed0", "results.json")))["config"]
    searched = flat_keys(searched_run)
    if report["adopt"]:
        assert all(shipped[key] == searched[key] for key in paper), folder  # the searched values, as checked
        assert any(shipped[key] != value for key, value in paper.items()), folder
    else:
        assert all(shipped[key] == value for key, value in paper.items()), (folder, paper)


def test_every_searched_preset_has_an_adoption_check():
    """Issue 52: each preset that is (or was) a search's best trial went through the rule."""
    assert {"permuted_mnist-er", *(f"{name}-gcl" for name in SEARCHED_GCL)} <= set(CHECKED)
