"""The tfds source, offline: through TFDS's mock data, and TFDS's real MNIST builder where there is
no network (a download that fails at once and leaves nothing behind)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from test_sources import load_both, one_line_data_error

from gcl_tf.data.sources import make_source

from conftest import REPO


# ------------------------------------------------------------------------------------ tfds
@pytest.mark.parametrize("dataset, shape", [("mnist", (28, 28, 1)), ("cifar10", (32, 32, 3))])
def test_tfds_source_through_mock_data(make_config, monkeypatch, tmp_path, dataset, shape):
    import tensorflow_datasets as tfds

    # No network: any attempt to download would fail loudly.
    def no_download(*args, **kwargs):
        raise AssertionError("the TFDS source tried to download")

    monkeypatch.setattr(tfds.download.DownloadManager, "download", no_download)
    monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract", no_download)
    config = make_config({"benchmark": {"source": "tfds", "dataset": dataset, "path": str(tmp_path)}})
    with tfds.testing.mock_data(num_examples=24):
        source, train, test = load_both(config)
    assert source.num_classes == 10
    for split in (train, test):
        assert split.images.shape == (24,) + shape and split.images.dtype == np.uint8
        assert split.labels.dtype == np.int64
        assert split.labels.min() >= 0 and split.labels.max() < 10


def test_tfds_unknown_dataset_is_a_data_error(make_config):
    config = make_config({"benchmark": {"source": "tfds", "dataset": "no_such_dataset_xyz"}})
    message = one_line_data_error(lambda: make_source(config.benchmark).num_classes)
    assert "no_such_dataset_xyz" in message and "mnist" in message


# No network, whatever the machine: every HTTP(S) request goes to a proxy that refuses connections
# (port 9, discard). TFDS's downloader would retry each URL ten times with a doubling pause (about
# 3.5 minutes); gcl_tf's probe (gcl_tf/data/tfds_files.py) fails it at once. NO_RETRIES keeps a
# test that is not about that from waiting if it regressed.
OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
NO_RETRIES = "import tensorflow_datasets.core.download.downloader as d; d.MAX_RETRIES = 0"


def offline(monkeypatch) -> dict:
    """No network (OFFLINE), and what TFDS's downloader then does, counted: ``probed``, the URLs
    gcl_tf's probe tried before TFDS opened them; ``retries``, urllib3's retries of a failed
    request (their pauses skipped, so that a regression fails fast instead of waiting)."""
    from urllib3.util.retry import Retry

    from gcl_tf.data import tfds_files

    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    for key in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(key, raising=False)
    seen = {"probed": [], "retries": 0}
    probe, increment = tfds_files.check_reachable, Retry.increment

    def probed(url, *args, **kwargs):
        seen["probed"].append(url)
        return probe(url, *args, **kwargs)

    def counted(self, *args, **kwargs):
        seen["retries"] += 1
        return increment(self, *args, **kwargs)

    monkeypatch.setattr(tfds_files, "check_reachable", probed)
    monkeypatch.setattr(Retry, "increment", counted)
    monkeypatch.setattr(Retry, "sleep", lambda self, response=None: None)
    return seen


@pytest.mark.slow  # TFDS's own MNIST builder, and the CLI in a second process
def test_tfds_runs_its_real_builder_and_fails_at_once_for_want_of_the_network(monkeypatch, tmp_path):
    """``gcl_tf.data.load("mnist", source="tfds")`` into an empty data_dir runs TFDS's real MNIST
    builder (no mock_data): it reads the dataset's info and gets as far as opening MNIST's URLs,
    where the download fails at once (no retry) because there is no network; our one line says
    so (and not that a module is missing), the data_dir is left as it was (nothing: no temporary
    file, no empty mnist/ that would read as prepared), and the CLI prints the line and exits 2."""
    import gcl_tf

    seen = offline(monkeypatch)
    data_dir = tmp_path / "tfds"
    source = gcl_tf.data.load("mnist", source="tfds", path=str(data_dir))
    assert source.num_classes == 10 and source.class_names()[:2] == ["0", "1"]  # the builder's own info
    message = one_line_data_error(lambda: source.load("train"))
    assert message.startswith(f"TFDS dataset 'mnist' (train) is not prepared in {data_dir} and could not be "
                              "downloaded: no network (ConnectionError: cannot reach 127.0.0.1:9 ("), message
    assert "tfds build mnist --data_dir DIR" in message and "module" not in message
    assert seen["probed"] and all("/mnist/" in url for url in seen["probed"]), seen  # TFDS's builder got there
    assert seen["retries"] == 0  # failed at once, not after TFDS's ten retries per URL
    assert not data_dir.exists(), sorted(str(p) for p in data_dir.rglob("*"))

    config = tmp_path / "config.yaml"
    config.write_text(f"benchmark: {{name: permuted, dataset: mnist, source: tfds, path: {data_dir}, num_tasks: 2,"
                      " samples_per_task: 20}\nmethod: {name: finetune}\nmodel: {hidden_size: 8}\n")
    code = f"from gcl_tf.train import main\nmain(['--config', {str(config)!r}, '--output', {str(tmp_path / 'run')!r}])"
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**env, **OFFLINE, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if not line.startswith(("E0000 ", "W0000 ", "WARNING: All"))]
    assert len(lines) == 1 and "could not be downloaded: no network (ConnectionError: " in lines[0], proc.stderr[-3000:]
    assert not data_dir.exists() and not (tmp_path / "run").exists()


@pytest.mark.slow  # TFDS's own MNIST builder
def test_a_failed_tfds_download_leaves_what_was_there_before(monkeypatch, tmp_path):
    """A data_dir holding another dataset and its downloads: a failed download removes only what
    it made, and the empty mnist/ folder a user made is not reported as prepared."""
    import gcl_tf
    from gcl_tf.data.tfds_files import prepared

    offline(monkeypatch)
    data_dir = tmp_path / "tfds"
    for folder in ("cifar10/3.0.2", "downloads/cifar10", "downloads/extracted", "mnist"):
        (data_dir / folder).mkdir(parents=True)
    (data_dir / "cifar10" / "3.0.2" / "dataset_info.json").write_text("{}")
    (data_dir / "downloads" / "cifar10" / "part.tmp.0123").write_text("theirs")
    before = sorted(str(p) for p in data_dir.rglob("*"))
    assert prepared(str(data_dir), "cifar10") and not prepared(str(data_dir), "mnist")
    one_line_data_error(lambda: gcl_tf.data.load("mnist", source="tfds", path=str(data_dir)).load("train"))
    assert sorted(str(p) for p in data_dir.rglob("*")) == before


@pytest.mark.slow  # a second process
def test_tfds_missing_module_is_not_blamed_on_the_network(tmp_path):
    """A module TFDS imports on first use (here importlib_resources, hidden as on an install
    without it) is named in the one line, which does not blame the network."""
    code = ("import sys; sys.modules['importlib_resources'] = None  # importing it raises ModuleNotFoundError\n"
            f"{NO_RETRIES}\nimport gcl_tf\nfrom gcl_tf.errors import DataError\n"
            f"try:\n    gcl_tf.data.load('mnist', source='tfds', path={str(tmp_path)!r}).load('train')\n"
            "except DataError as error:\n    print(error)\n")
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**env, **OFFLINE, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    message = proc.stdout.strip().splitlines()[-1]
    assert "TFDS needs the Python module 'importlib_resources', which is not installed" in message, message
    assert "not a network problem" in message and "no network" not in message


def test_tfds_dependencies_are_installed_with_gcl_tf():
    """What TFDS imports on first use and its own metadata does not require (importlib_resources,
    with etils >= 1.10 on Python >= 3.9) is a dependency of ours, and installed."""
    import importlib.util
    import re

    with open(os.path.join(REPO, "pyproject.toml")) as handle:
        dependencies = re.search(r"^dependencies = \[(.*?)^\]", handle.read(), re.S | re.M).group(1)
    assert re.search(r'^\s*"importlib[_-]resources[">=<]', dependencies, re.M), dependencies
    assert importlib.util.find_spec("importlib_resources") is not None
