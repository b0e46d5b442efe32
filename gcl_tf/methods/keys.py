"""A method's keys, declared once: the ``Config`` dataclass of its module.

Each key is a field of ``Config`` (a :class:`gcl_tf.schema.MethodConfig`): its name, type, range,
default and comment are written there and nowhere else. From it come

- the constructor's keywords: a method's ``__init__`` takes the keys as ``**keys`` and passes
  them on to :class:`~gcl_tf.methods.base.ContinualModel`, which checks them against ``Config``
  (types, ranges, the rules between keys) and keeps them as ``self.settings``;
  :func:`declare` gives the class the signature that lists them (``help()``,
  ``inspect.signature``, IPython's ``?``), with their types and defaults;
- the check of a config's ``method`` section before TensorFlow loads: :func:`read_config` runs
  the ``Config`` class statement of a method's module on its own, without importing the module
  (which imports TensorFlow), so a command line answers a misspelt key, a value out of range or a
  broken rule between keys in a fraction of a second.

What :func:`read_config` needs: the ``Config`` class statement, and the names it uses bound by the
module's imports from the light modules (:data:`LIGHT`), from another method's ``Config`` (read
the same way) or by literal constants of the module. A ``Config`` that needs more cannot be read
so: its keys are then checked once the module is imported (tests/test_config.py checks that every
registered method's reads).
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
import os
import sys
import typing

from gcl_tf.schema import MethodConfig, build_dataclass, did_you_mean

_PACKAGE = "gcl_tf"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds gcl_tf/
#: Modules a ``Config`` may use when it is read from source: imported for real (no TensorFlow).
LIGHT = frozenset({"__future__", "typing", "dataclasses", "math", "gcl_tf.schema", "gcl_tf.errors"})
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


# ----------------------------------------------------------------------------- the class's keys
def config_of(cls) -> type | None:
    """A method class's ``Config``: that of the module defining it or, for a class whose module
    has none, of its nearest ancestor's; None when there is none."""
    for klass in cls.__mro__:
        config = getattr(sys.modules.get(klass.__module__), "Config", None)
        if isinstance(config, type) and issubclass(config, MethodConfig) and dataclasses.is_dataclass(config):
            return config
    return None


def key_fields(config) -> list:
    """The fields of ``config`` a constructor takes (all but ``name``)."""
    return [] if config is None else [f for f in dataclasses.fields(config) if f.name != "name"]


def settings(cls, keys: dict):
    """``cls``'s ``Config`` built from the keywords ``keys``: a TypeError for a keyword that is no
    key (as Python says it), a ConfigError naming ``Class.key`` for a wrong type, a value out of
    range or a broken rule between keys. None for a class without ``Config``."""
    config = config_of(cls)
    names = [f.name for f in key_fields(config)]
    for key in keys:
        if key not in names:
            hint = did_you_mean(key, names + list(inspect.signature(cls.__init__).parameters))
            raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {key!r}"
                            + (f"; {hint.strip()}" if hint else ""))
    if config is None:
        return None
    built = build_dataclass(config, keys, cls.__name__)
    built.check_settings(cls.__name__)
    return built


def declare(cls, root) -> None:
    """Give the method class ``cls`` the constructor signature its keys make (see the module
    docstring), refusing at definition a class that breaks the scheme: a TypeError when its
    constructor names a key of its ``Config`` (declared once, there) or does not pass ``**keys``
    on to ``root`` (:class:`~gcl_tf.methods.base.ContinualModel`) while ``Config`` has keys."""
    config = config_of(cls)
    written, reaches_root = _written_parameters(cls, root)
    keys = key_fields(config)
    for f in keys:
        if f.name in written:
            raise TypeError(f"{cls.__name__}: its constructor names the key {f.name}, declared in "
                            f"{config.__module__}.Config; declare it there only (the constructor takes it as "
                            "**keys and reads self.settings)")
    if keys and not reaches_root:
        raise TypeError(f"{cls.__name__}: its constructor must pass **keys on to {root.__name__} (the keys of "
                        f"{config.__module__}.Config)")
    hints = typing.get_type_hints(config) if keys else {}
    generated = [inspect.Parameter(f.name, _KEYWORD, default=_default(f), annotation=hints[f.name]) for f in keys]
    common = _own_parameters(root)

    def rank(p):  # positional, required keywords, the class's own, (its keys), the common ones
        if p.kind is not _KEYWORD:
            return 0
        return 1 if p.default is inspect.Parameter.empty else 3 if p.name in common else 2

    ordered = sorted(written.values(), key=rank)
    parameters = [p for p in ordered if rank(p) < 3] + generated + [p for p in ordered if rank(p) == 3]
    signature = inspect.Signature(parameters)
    if "__init__" not in vars(cls):  # its own __init__ to carry its own signature
        cls.__init__ = _passing_on(cls)
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    cls.__init__.__signature__ = signature.replace(parameters=[self, *parameters])
    cls.__signature__ = signature
    cls.former_defaults = dict(config.former_defaults) if config is not None else {}


def _default(f):
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _own_parameters(klass) -> dict:
    """The parameters of ``klass``'s own ``__init__`` as written (``self`` and ``*args`` left out)."""
    function = vars(klass)["__init__"]
    written = getattr(function, "__written_signature__", None)
    if written is None:
        written = function.__written_signature__ = _resolved(inspect.signature(function), function)
    return {name: p for name, p in list(written.parameters.items())[1:]
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}


def _resolved(signature: inspect.Signature, function) -> inspect.Signature:
    """``signature`` with its annotations evaluated (a module with postponed annotations)."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - the annotations as written, then
        return signature
    return signature.replace(parameters=[p.replace(annotation=hints.get(name, p.annotation))
                                         for name, p in signature.parameters.items()])


def _written_parameters(cls, root) -> tuple[dict, bool]:
    """The parameters the chain of ``__init__`` from ``cls`` takes as written, in the order a
    call meets them, and whether the chain passes ``**keys`` on up to ``root``'s."""
    written = {}
    for klass in cls.__mro__:
        function = vars(klass).get("__init__")
        if function is None or getattr(function, "passes_on", False):
            continue
        for name, p in _own_parameters(klass).items():
            written.setdefault(name, p)
        takes_keys = any(p.kind is inspect.Parameter.VAR_KEYWORD
                         for p in function.__written_signature__.parameters.values())
        if klass is root or not takes_keys:
            return written, klass is root
    return written, False


def _passing_on(cls):
    def __init__(self, *args, **keys):
        super(cls, self).__init__(*args, **keys)

    __init__.passes_on = True
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


# ----------------------------------------------------------------------------- read from source
class _Unreadable(Exception):
    pass


@functools.lru_cache(maxsize=None)
def read_config(module: str, loaded: bool = True) -> type | None:
    """``module``'s ``Config`` without importing the module: the module's own when it is already
    imported (``loaded``; False: read from source even then, and the ``Config`` classes it
    derives from too), else its class statement run on its own (see the module docstring); None
    when it cannot be read so."""
    try:
        return _read(module, "Config", 0, loaded)
    except (_Unreadable, OSError, SyntaxError, ValueError, NameError, TypeError, AttributeError, ImportError):
        return None


def _read(module: str, name: str, depth: int, loaded: bool):
    if depth > 8:
        raise _Unreadable(f"{module}.{name}")
    if module in LIGHT or (loaded and module in sys.modules):
        return getattr(_import(module), name)
    path, tree = _source(module)
    imports = _imported_names(tree, module, path)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            namespace = {"__name__": module}
            for used in _free_names(node):
                namespace[used] = _bind(used, tree, imports, depth, loaded)
            code = compile(ast.Module(body=[node], type_ignores=[]), path, "exec", dont_inherit=True)
            exec(code, namespace)  # the class statement alone, its annotations evaluated
            return namespace[name]
    if name in imports:  # re-exported: read it where it is defined
        return _read(*imports[name], depth + 1, loaded)
    raise _Unreadable(f"{module}.{name}")


def _import(module: str):
    __import__(module)
    return sys.modules[module]


def _source(module: str) -> tuple[str, ast.Module]:
    if not module.startswith(_PACKAGE + "."):
        raise _Unreadable(module)
    base = os.path.join(_ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return path, ast.parse(handle.read(), path)
    raise _Unreadable(module)


def _imported_names(tree: ast.Module, module: str, path: str) -> dict:
    """``{local name: (module, name)}`` of the module's ``from X import Y`` lines."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                origin = f"{parent}.{origin}" if origin else parent
            for alias in node.names:
                names[alias.asname or alias.name] = (origin, alias.name)
    return names


def _free_names(node: ast.ClassDef) -> set:
    """Names the class statement reads that it does not bind itself (its methods' parameters and
    local variables left out); builtins left out."""
    loaded, bound = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (loaded if isinstance(sub.ctx, ast.Load) else bound).add(sub.id)
        elif isinstance(sub, ast.arg):
            bound.add(sub.arg)
    return {name for name in loaded - bound if not hasattr(builtins, name)}


def _bind(name: str, tree: ast.Module, imports: dict, depth: int, loaded: bool):
    """The value of a module-level ``name`` the class uses: imported from a light module, another
    module's class (read from source) or a module (its attributes read so), or a literal constant."""
    if name in imports:
        origin, imported = imports[name]
        submodule = f"{origin}.{imported}"
        if origin in LIGHT or (loaded and submodule in sys.modules):
            return getattr(_import(origin), imported)
        try:
            _source(submodule)
        except _Unreadable:
            return _read(origin, imported, depth + 1, loaded)
        return _SourceModule(submodule, depth + 1, loaded)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise _Unreadable(name)


class _SourceModule:
    """A module seen through :func:`_read`: ``er.Config`` is er's ``Config`` read from source."""

    def __init__(self, module: str, depth: int, loaded: bool):
        self._module, self._depth, self._loaded = module, depth, loaded

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return _read(self._module, name, self._depth, self._loaded)
