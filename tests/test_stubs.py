"""The type stubs (gcl_tf/methods/stubs.py): in step with the modules and their ``Config``, every key a
keyword of its class's ``__init__`` with its type and default (shipped: tests/test_structure.py), and
read by a type checker (mypy, when installed) so that a wrong or misspelt key is an error before a run."""
from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import os
import subprocess
import sys
import typing

import pytest

from gcl_tf import methods
from gcl_tf.methods import keys, stubs

from conftest import REPO

PACKAGE = os.path.join(REPO, "gcl_tf")


def stub_init(cls) -> ast.FunctionDef:
    """The ``__init__`` of ``cls`` in the stub of the module defining it."""
    path = os.path.join(REPO, *cls.__module__.split(".")) + ".pyi"
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    klass = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls.__name__)
    return next(node for node in klass.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")


def test_the_stubs_are_in_step_with_the_modules_and_their_configs():
    assert stubs.stale() == [], "stubs out of step: run python -m gcl_tf.methods.stubs --write"


@pytest.mark.parametrize("name", methods.names())
def test_a_stub_takes_every_key_with_its_type_and_default(name):
    """Read back from the stub file: each key of the class's ``Config`` is a keyword-only parameter
    whose annotation is the key's type and whose default is the key's; no ``**keys`` left."""
    cls = methods.method_class(name)
    config = keys.config_of(cls)
    init = stub_init(cls)
    assert init.args.kwarg is None, f"{cls.__name__}: the stub still takes **{init.args.kwarg.arg}"
    written = {arg.arg: (arg, value) for arg, value in zip(init.args.kwonlyargs, init.args.kw_defaults)}
    namespace = {**vars(typing), **vars(builtins)}
    hints = typing.get_type_hints(config)
    for field in keys.key_fields(config):
        assert field.name in written, f"{cls.__name__}: the stub misses the key {field.name}"
        arg, value = written[field.name]
        assert eval(ast.unparse(arg.annotation), namespace) == hints[field.name], (cls.__name__, field.name)
        expected = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        assert ast.literal_eval(value) == expected, (cls.__name__, field.name)
    common = set(inspect.signature(cls.__init__).parameters) - {"self"}
    assert set(written) | {arg.arg for arg in init.args.args[1:]} == common


def test_check_lists_a_changed_a_missing_and_a_leftover_stub_and_write_mends_them(tmp_path):
    root = str(tmp_path)
    assert sorted(stubs.write(root)) == sorted(stubs.stubs())  # into an empty copy: every stub
    assert stubs.stale(root) == []
    with open(tmp_path / "methods" / "er.pyi", "a", encoding="utf-8") as handle:
        handle.write("def extra() -> None: ...\n")
    os.remove(tmp_path / "methods" / "gcl" / "model.pyi")
    (tmp_path / "methods" / "gone.pyi").write_text("x: int\n")
    assert sorted(stubs.stale(root)) == ["methods/er.pyi", "methods/gcl/model.pyi", "methods/gone.pyi"]
    stubs.write(root)
    assert stubs.stale(root) == [] and not (tmp_path / "methods" / "gone.pyi").exists()


USER_SCRIPT = '''\
import gcl_tf
from gcl_tf.methods.er import ER
ER(memory_size="x")
ER(memory_sise=5)
ER(num_classes=10, memory_size=5, replay_batch_size=None, seed=1)
gcl_tf.GCL(num_classes=10, kernel="cosine")
gcl_tf.GCL(num_classes=10, kernel="normalized", kernel_width="median", also_test_graph_samples=[1])
'''


def test_mypy_reads_the_keys_from_the_stubs(tmp_path):
    """A user's script checked by mypy, gcl_tf found as an installed package (on the path, as
    site-packages holds it): a key of the wrong type or misspelt is an error on its line, through
    the module and through ``gcl_tf.GCL``; the right keys are none."""
    pytest.importorskip("mypy")
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-pretty",
                           "--hide-error-context", "user.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    errors = {}
    for line in done.stdout.splitlines():
        if line.startswith("user.py:") and ": error: " in line:
            number = int(line.split(":")[1])
            errors.setdefault(number, []).append(line.split(": error: ", 1)[1])
    said = done.stdout + done.stderr
    assert 'Argument "memory_size" to "ER" has incompatible type "str"; expected "int"  [arg-type]' in \
        errors.get(3, []), said
    assert any(e.startswith('Unexpected keyword argument "memory_sise" for "ER"') for e in errors.get(4, [])), said
    assert any(e.startswith('Argument "kernel" to "GCL" has incompatible type') for e in errors.get(6, [])), said
    assert set(errors) == {3, 4, 6}, said
