"""What ``import gcl_tf`` arranges, without importing TensorFlow or Keras itself:

- **Keras finds the learners.** ``keras.models.load_model("learner.keras")`` needs the class of
  the saved learner registered with Keras (``gcl_tf>GCL``, ...), but the methods are imported on
  first use (``import gcl_tf`` stays light). So as soon as Keras is imported (now, if it already
  is, or later, whatever imports it), every gcl_tf class a saved learner can name is registered
  under its name with a small stand-in (:class:`_Deferred`) whose ``from_config`` imports the
  class's module, which registers the class itself in its place, and builds the learner. No
  gcl_tf module is imported while Keras loads (TensorFlow imports Keras half-way through its own
  import: importing the methods then would fail), and importing Keras costs nothing more.
- **TensorFlow starts quietly**, as in the command-line tools: its first import after
  ``import gcl_tf`` (by a method on first use, by ``import keras``, or by the user) drops the
  start-up INFO lines and the CUDA probe's failure on a machine without a GPU
  (:mod:`gcl_tf.quiet`), with ``TF_CPP_MIN_LOG_LEVEL`` 2 unless it is set
  (``TF_CPP_MIN_LOG_LEVEL=0`` shows everything). A TensorFlow imported before gcl_tf that
  runs without the oneDNN kernels gcl_tf would have chosen is named in one line
  (:func:`gcl_tf.quiet.note_import_order`).

Both hook the first import of ``keras`` and ``tensorflow`` with a finder at the front of
``sys.meta_path`` that wraps the module's loader; it steps aside once both are imported.
"""
from __future__ import annotations

import importlib
import importlib.abc
import sys

PACKAGE = "gcl_tf"
# Every class a saved learner can name (registered as "gcl_tf>Name" when its module is imported):
# the methods (read from their registry, gcl_tf/methods/__init__.py) and the layers of the
# backbones. tests/test_api.py checks that it is complete.
def _classes() -> dict:
    from gcl_tf.methods import REGISTRY  # the registry: no TensorFlow, no Keras

    return {**{cls: module for module, cls, _ in REGISTRY.values()},
            "FusedBatchNormalization": "gcl_tf.backbones",
            "ContinualModel": "gcl_tf.methods.base"}  # the methods' base class (registered like them)


CLASSES = _classes()
_WATCHED = ("keras", "tensorflow")


class _Deferred:
    """Stands in for a gcl_tf class in Keras's registry until its module is imported."""

    def __init__(self, name: str, module: str):
        self.name, self.module = name, module

    def __repr__(self):
        return f"<{PACKAGE}>{self.name}: imported from {self.module} on first use>"

    def resolve(self):
        import keras

        registered = f"{PACKAGE}>{self.name}"
        importlib.import_module(self.module)  # defining the class registers it, replacing this
        cls = keras.saving.get_custom_objects().get(registered)
        if cls is None or isinstance(cls, _Deferred):
            raise TypeError(f"Could not locate class {self.name!r}: {self.module} defines no {registered}")
        return cls

    def from_config(self, config, custom_objects=None):
        return self.resolve().from_config(config)


def register_with_keras() -> None:
    """Put a :class:`_Deferred` under every name of :data:`CLASSES` not registered yet."""
    import keras

    registry = keras.saving.get_custom_objects()
    for name, module in CLASSES.items():
        registry.setdefault(f"{PACKAGE}>{name}", _Deferred(name, module))


class _Loader(importlib.abc.Loader):
    """The module's own loader, with gcl_tf's step after it runs the module."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader  # the module's own, for whoever reads it later
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        if module.__name__ == "tensorflow":
            from gcl_tf import quiet

            quiet.quiet_import(lambda: self.loader.exec_module(module), module)
        else:
            self.loader.exec_module(module)
        if module.__name__ == "keras":
            register_with_keras()
        _step_aside()

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_FINDER = _Finder()


def _step_aside() -> None:
    if all(name in sys.modules for name in _WATCHED) and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def install() -> None:
    """Called by ``import gcl_tf``: register the classes now if Keras is imported, and hook the
    first import of Keras and TensorFlow otherwise."""
    from gcl_tf import quiet

    quiet.note_import_order()  # TensorFlow imported first (by `import keras`): its oneDNN choice is made
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "saving"):
        register_with_keras()
    if not all(name in sys.modules for name in _WATCHED) and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
