"""Config: YAML + --set overrides, presets, and one-line errors that name the key and what is allowed."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from gcl_tf.config import load_config, resolve
from gcl_tf.errors import ConfigError

from conftest import REPO


def write(tmp_path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def error_of(raw=None, overrides=(), path=None) -> str:
    with pytest.raises(ConfigError) as info:
        if path is not None:
            load_config(path, overrides)
        else:
            raw = dict(raw or {})
            raw.setdefault("method", {"name": "finetune"})  # the default method (gcl) may be absent
            resolve(raw, overrides)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_yaml_file_and_set_overrides(tmp_path):
    path = write(tmp_path, """
        seed: 3
        benchmark:
          name: rotated
          source: digits
          dataset: digits
          num_tasks: 4
        method:
          name: er
          memory_size: 50
        train:
          learning_rate: 1e-3      # YAML 1.1 reads this as a string: still a number
          optimizer: adam
        eval:
          batch_size: 64
    """)
    config = load_config(path, ["train.batch_size=32", "benchmark.multi_head=false", "seed=7",
                                "method.memory_size=80", "train.learning_rate=2e-2"])
    assert config.seed == 7
    assert config.benchmark.name == "rotated" and config.benchmark.num_tasks == 4
    assert config.benchmark.multi_head is False
    assert config.method.name == "er" and config.method.memory_size == 80
    assert config.train.batch_size == 32 and config.train.optimizer == "adam"
    assert config.train.learning_rate == pytest.approx(0.02)
    assert isinstance(config.train.learning_rate, float)
    assert config.eval.batch_size == 64
    # Defaults fill what the file leaves out.
    assert config.model.backbone == "mlp" and config.train.epochs == 1

    config = load_config(path, ["benchmark.name=split", "benchmark.multi_head=true"])
    assert config.benchmark.multi_head is True
    assert load_config(path).train.learning_rate == pytest.approx(1e-3)


def test_presets_apply_for_the_selected_method_and_set_wins(tmp_path):
    path = write(tmp_path, """
        benchmark: {source: digits, dataset: digits}
        method: {name: finetune}
        train: {learning_rate: 0.1}
        presets:
          er:
            method: {memory_size: 123}
            train: {learning_rate: 0.03}
    """)
    finetune = load_config(path)
    assert finetune.method.name == "finetune" and finetune.train.learning_rate == pytest.approx(0.1)
    er = load_config(path, ["method.name=er"])
    assert er.method.memory_size == 123 and er.train.learning_rate == pytest.approx(0.03)
    er = load_config(path, ["method.name=er", "train.learning_rate=0.5", "method.memory_size=7"])
    assert er.train.learning_rate == pytest.approx(0.5) and er.method.memory_size == 7


def test_a_typo_in_any_preset_is_one_line_naming_the_preset(tmp_path):
    """Selected or not, a preset's unknown key, wrong type or value out of range stops any run of
    the file, and the message says which preset holds it."""
    def config_with(gcl_preset: str) -> str:
        return write(tmp_path, f"""
            benchmark: {{source: digits, dataset: digits}}
            method: {{name: finetune}}
            presets:
              er:
                method: {{memory_size: 50}}
              gcl:
                {gcl_preset}
        """)

    typo = config_with("method: {graph_lamda: 5}")
    for selected in ([], ["method.name=er"], ["method.name=gcl"]):  # gcl's preset unselected, then selected
        message = error_of(path=typo, overrides=selected)
        assert message.startswith("presets.gcl: unknown key 'method.graph_lamda'; did you mean "
                                  "'method.graph_lambda'? allowed: "), message
        assert "graph_lambda" in message
    message = error_of(path=config_with("train: {learning_rate: -1}"), overrides=["method.name=er"])
    assert message.startswith("presets.gcl: train.learning_rate: -1.0 is out of range; allowed: (0, inf)"), message
    message = error_of(path=config_with("train: {lr: 0.1}"))
    assert message.startswith("presets.gcl: unknown key 'train.lr'"), message
    assert load_config(config_with("method: {graph_lambda: 5}"), ["method.name=er"]).method.memory_size == 50


def test_quickstart_config_is_valid_for_finetune_and_er():
    path = os.path.join(REPO, "configs", "quickstart.yaml")
    config = load_config(path)
    assert config.benchmark.source == "digits" and config.benchmark.name == "permuted"
    for name in ("finetune", "er"):
        assert load_config(path, [f"method.name={name}"]).method.name == name


@pytest.mark.parametrize(
    "raw, overrides, expected",
    [
        # unknown keys: the key and the allowed keys
        ({"train": {"lr": 0.1}}, (), ["train.lr", "learning_rate", "batch_size"]),
        ({"bogus": 1}, (), ["bogus", "benchmark", "seed"]),
        ({"method": {"name": "finetune", "memory_size": 3}}, (),
         ["method.memory_size", "the method is finetune", "allowed: finetune's keys (none)"]),
        ({}, ["model.width=3"], ["model.width", "hidden_size"]),
        # wrong types
        ({"train": {"batch_size": "ten"}}, (), ["train.batch_size", "integer", "'ten'"]),
        ({"train": {"batch_size": 2.5}}, (), ["train.batch_size", "integer"]),
        ({"benchmark": {"multi_head": "maybe"}}, (), ["benchmark.multi_head", "true or false"]),
        ({"train": {"learning_rate": "fast"}}, (), ["train.learning_rate", "number"]),
        ({"train": {"learning_rate": True}}, (), ["train.learning_rate", "number"]),
        ({"benchmark": {"samples_per_task": "all"}}, (), ["benchmark.samples_per_task", "integer or null"]),
        ({"train": 5}, (), ["train", "mapping"]),
        # values outside the allowed set
        ({"benchmark": {"name": "shuffled"}}, (), ["benchmark.name", "'shuffled'", "permuted, rotated, split"]),
        ({"benchmark": {"source": "ftp"}}, (), ["benchmark.source", "tfds, idx, npz, folder, digits"]),
        ({"model": {"backbone": "vgg"}}, (), ["model.backbone", "mlp, convnet, resnet18"]),
        ({"method": {"name": "magic"}}, (), ["method.name", "'magic'", "finetune", "er"]),
        ({}, ["train.optimizer=rmsprop"], ["train.optimizer", "sgd, adam"]),
        # values outside the allowed range
        ({"train": {"batch_size": 0}}, (), ["train.batch_size", "0", "[1, inf)"]),
        ({"train": {"learning_rate": 0}}, (), ["train.learning_rate", "(0, inf)"]),
        ({"benchmark": {"validation_fraction": 1.0}}, (), ["benchmark.validation_fraction", "[0, 1)"]),
        ({"method": {"name": "er", "memory_size": -3}}, (), ["method.memory_size", "-3", "[1, inf)"]),
        ({"seed": -1}, (), ["seed", "-1", "[0, 4294967295]"]),
        # inconsistent combinations and malformed overrides
        ({"benchmark": {"source": "idx", "path": None}}, (), ["benchmark.path", "idx"]),
        ({"benchmark": {"name": "permuted", "multi_head": True}}, (), ["benchmark.multi_head", "allowed: false"]),
        ({}, ["train.batch_size"], ["train.batch_size", "dotted.key=value"]),
        ({"seed": 1}, ["seed.value=3"], ["seed", "not a section"]),
        ({}, ["seed.value=3"], ["seed", "integer"]),
        ({"presets": {"magic": {}}}, (), ["presets.magic", "allowed"]),
    ],
)
def test_invalid_configs_raise_one_line_naming_key_and_allowed(raw, overrides, expected):
    message = error_of(raw, overrides)
    for part in expected:
        assert part in message, (part, message)


def test_malformed_yaml_and_missing_file(tmp_path):
    path = write(tmp_path, "train:\n  learning_rate: [0.1\n  epochs: 2\n")
    message = error_of(path=path)
    assert "not valid YAML" in message and "line" in message and "config.yaml" in message
    message = error_of(path=write(tmp_path, "- just\n- a list\n", "list.yaml"))
    assert "mapping" in message
    message = error_of(path=str(tmp_path / "missing.yaml"))
    assert "missing.yaml" in message and "does not exist" in message


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("train:\n  batch_size: [\n", "not valid YAML"),
        ("method:\n  name: er\n  memory_size: many\n", "method.memory_size: expected an integer, got 'many'"),
    ],
)
@pytest.mark.slow
def test_cli_bad_config_exits_2_with_one_line_and_no_traceback(tmp_path, text, fragment):
    path = write(tmp_path, text, "bad.yaml")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-m", "gcl_tf.train", "--config", path, "--output", str(tmp_path / "out")],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "out" / "results.json").exists()


def test_layers_import_downward():
    """gcl_tf.schema <- gcl_tf.methods <- gcl_tf.config: no module of the lower layers imports one
    above it, at the top or inside a function (no hidden cycle); the methods' speed checks
    (gcl_tf/speed/, run by ``python -m gcl_tf.benchmark throughput|gpu``) sit above the
    benchmark's machinery, which does not import them."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "gcl_tf"
    lower = [root / "schema.py", *sorted((root / "methods").rglob("*.py")), *sorted((root / "memory").rglob("*.py"))]
    above = ("gcl_tf.config", "gcl_tf.train", "gcl_tf.tune", "gcl_tf.api", "gcl_tf.data.benchmarks",
             "gcl_tf.benchmark", "gcl_tf.speed")
    for path in lower:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "gcl_tf":
                names = [f"gcl_tf.{a.name}" for a in node.names]
            for name in names:
                assert not name.startswith(above), f"{path.relative_to(root)} imports {name}"


def test_every_method_class_names_the_registrys_config():
    """The registry's ``Config`` (what a config's method section is checked against, before
    TensorFlow loads) is the one the method class builds its settings from."""
    from gcl_tf import methods

    for name in methods.names():
        assert methods.method_class(name).Config is methods.config_class(name), name
        own = methods.config_class(name)().name  # its own, or that of the method whose keys it has (CBRS: ER's)
        assert own == name or methods.config_class(own) is methods.config_class(name), name


PRECHECK = """
import sys
from gcl_tf.config import precheck
from gcl_tf.errors import ConfigError
try:
    precheck(sys.argv[1], sys.argv[2:])
except ConfigError as error:
    print("ERROR", error)
print("TENSORFLOW", "tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("overrides, expected", [
    (["method.name=gcl", "method.graph_lambda=-1"], "method.graph_lambda: -1.0 is out of range; allowed: [0, inf)"),
    (["method.name=er", "method.memory_size=-5"], "method.memory_size: -5 is out of range; allowed: [1, inf)"),
    (["method.name=gcl", "method.kernel=cosine"], "method.kernel: 'cosine' is not allowed; allowed: rbf, normalized"),
    (["method.name=gcl", "method.context_batch=5"], "method.context_batch: needs method.edge_memory: embeddings"),
    (["method.name=mer", "train.optimizer=adam"], "train.optimizer: mer uses plain SGD steps"),
    (["method.name=er", "method.replay_batchsize=4"], "unknown key 'method.replay_batchsize'; did you mean"),
    (["method.name=gem", "train.mixed_precision=mixed_float16"], "train.mixed_precision: mixed_float16 needs loss "
                                                                 "scaling, which method gem"),
])
def test_a_method_keys_mistake_is_answered_before_tensorflow_loads(tmp_path, overrides, expected):
    """The method's keys (names, types, ranges, its own rules) are checked by the command line's
    precheck, which does not import TensorFlow (its Config is in a module that does not)."""
    path = write(tmp_path, "benchmark: {name: permuted, source: digits, dataset: digits}\n")
    proc = subprocess.run([sys.executable, "-c", PRECHECK, path, *overrides], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"ERROR {expected}" in proc.stdout and "TENSORFLOW False" in proc.stdout, proc.stdout
