"""gcl_tf turns TensorFlow's oneDNN kernels on where TensorFlow leaves them off (x86 CPUs without
AVX-512 neural-network features), before TensorFlow is imported, in the CLI and the Python API;
a user's own ``TF_ENABLE_ONEDNN_OPTS`` always wins, and deterministic runs stay deterministic."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from gcl_tf.quiet import ONEDNN_MACHINES, onednn_setting

X86 = platform.machine() in ONEDNN_MACHINES
MKL = "from tensorflow.python.util import _pywrap_util_port as port; print('onednn', port.IsMklEnabled())"


def test_onednn_is_chosen_on_x86_only_when_the_user_has_not_chosen():
    assert onednn_setting({}, "x86_64") == "1"
    assert onednn_setting({"PATH": "/bin"}, "AMD64") == "1"
    for given in ("0", "1", ""):  # a user's setting, even an empty one, is theirs
        assert onednn_setting({"TF_ENABLE_ONEDNN_OPTS": given}, "x86_64") is None
    for machine in ("aarch64", "arm64", "ppc64le", "s390x"):  # TensorFlow's own choice there
        assert onednn_setting({}, machine) is None


def _python(code: str, **env_changes) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    env.update(env_changes)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(not X86, reason="gcl_tf chooses oneDNN on x86 CPUs only")
@pytest.mark.parametrize("first_import", [
    "import gcl_tf, tensorflow",                                          # the Python API: any import of TensorFlow
    "import gcl_tf, keras",                                               # ... or of Keras, after gcl_tf
    "from gcl_tf.quiet import import_tensorflow; import_tensorflow()",    # the command-line entry points
])
def test_tensorflow_runs_with_onednn_after_gcl_tf_unless_the_user_says_otherwise(first_import):
    assert "onednn True" in _python(f"{first_import}\n{MKL}")
    assert "onednn False" in _python(f"{first_import}\n{MKL}", TF_ENABLE_ONEDNN_OPTS="0")


def test_the_import_order_note_is_for_onednn_off_where_gcl_tf_would_have_turned_it_on():
    from gcl_tf.quiet import onednn_off_note

    note = onednn_off_note({}, "x86_64", enabled=False)  # TensorFlow's default on an AVX2-only CPU
    assert "TF_ENABLE_ONEDNN_OPTS=1" in note and "\n" not in note
    assert onednn_off_note({}, "x86_64", enabled=True) is None  # on by itself (AVX-512 VNNI/BF16, as here)
    assert onednn_off_note({}, "x86_64", enabled=None) is None  # TensorFlow cannot say
    assert onednn_off_note({"TF_ENABLE_ONEDNN_OPTS": "0"}, "x86_64", enabled=False) is None  # the user's choice
    assert onednn_off_note({}, "aarch64", enabled=False) is None  # TensorFlow's own choice there


# TensorFlow as on a CPU where it leaves oneDNN off by default (AVX2, no AVX-512): what it reports.
ONEDNN_OFF = "from tensorflow.python.util import _pywrap_util_port as port; port.IsMklEnabled = lambda: False\n"


@pytest.mark.skipif(not X86, reason="gcl_tf chooses oneDNN on x86 CPUs only")
@pytest.mark.parametrize("code, said", [
    (ONEDNN_OFF + "import keras\nimport gcl_tf\nimport gcl_tf.quiet as q; q.note_import_order()", True),
    (ONEDNN_OFF + "import tensorflow\nimport gcl_tf", True),
    ("import keras\nimport gcl_tf", None),  # this machine: said unless TensorFlow turns oneDNN on by itself
    ("import gcl_tf\nimport keras", False),  # gcl_tf first: oneDNN chosen before TensorFlow loads
])
def test_tensorflow_imported_first_with_onednn_off_is_said_once_in_one_line(code, said):
    if said is None:  # TensorFlow's own default here: on with AVX-512 VNNI/BF16 (nothing to say), off with AVX2
        said = "onednn False" in _python("import tensorflow\n" + MKL)
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if "gcl_tf" in line]
    assert len(lines) == (1 if said else 0), proc.stderr
    assert not said or "set TF_ENABLE_ONEDNN_OPTS=1" in lines[0]
    if said:  # the user's own setting, even 0, is a choice: nothing to say
        chosen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                                env={**env, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"})
        assert chosen.returncode == 0 and "gcl_tf" not in chosen.stderr, chosen.stderr


DETERMINISTIC_STEPS = """
import hashlib
import gcl_tf, keras, numpy as np, tensorflow as tf
from gcl_tf.benchmark.workloads import random_batches
from gcl_tf.speed import make_model
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(0)
shape = (32, 32, 3)
model = make_model("gcl", shape, memory=20, backbone="convnet", hidden=32)
x, y = random_batches(shape, 6)
for i in range(6):
    model.train_on_batch(x[10 * i:10 * (i + 1)], y[10 * i:10 * (i + 1)])
digest = hashlib.sha256(b"".join(np.asarray(v).tobytes() for v in model.weights)).hexdigest()
print("weights", digest)
""" + MKL


@pytest.mark.slow
def test_a_deterministic_convnet_gcl_run_is_bit_identical_with_onednn():
    """Op determinism with oneDNN's convolutions and BatchNorm: two processes, the same weights
    after six GCL steps of the authors' ConvNet (memory filling, then replay)."""
    first, second = _python(DETERMINISTIC_STEPS), _python(DETERMINISTIC_STEPS)
    if X86:  # elsewhere TensorFlow's own choice, whatever it is
        assert "onednn True" in first
    assert first.split("weights")[1] == second.split("weights")[1]


@pytest.mark.parametrize("setting", [None, "0"])
def test_a_run_records_whether_tensorflow_ran_onednn(tmp_path, setting):
    """results.json says whether the run's TensorFlow ran oneDNN (its numbers move with it as with
    a seed): on under gcl_tf's choice on x86, off when the user says 0."""
    import json

    import yaml

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "benchmark": {"name": "permuted", "dataset": "digits", "source": "digits", "num_tasks": 2,
                      "samples_per_task": 20},
        "method": {"name": "finetune"}, "model": {"backbone": "mlp", "hidden_size": 8},
        "train": {"verbose": 0}}))
    run = f"from gcl_tf.train import main\nassert main(['--config', {str(config)!r}, '--output', " \
          f"{str(tmp_path / 'run')!r}]) in (0, None)\n"
    out = _python(run + MKL, **({} if setting is None else {"TF_ENABLE_ONEDNN_OPTS": setting}))
    ran = "onednn True" in out
    recorded = json.loads((tmp_path / "run" / "results.json").read_text())["onednn"]
    assert recorded is ran
    if setting == "0":
        assert recorded is False
    elif X86:
        assert recorded is True
