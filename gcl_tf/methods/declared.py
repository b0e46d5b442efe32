"""A method's config keys read from its module's source, without importing it.

A method module imports TensorFlow at its top, so importing it to learn its ``Config``'s keys
costs seconds; a command line checks the keys of ``method:`` before that (a typo is then
reported at once, gcl_tf/config.py). The ``Config`` dataclass is a declaration: its field names
are its annotated class attributes after those of its bases, which are read the same way in the
module they come from (another method's module, or :mod:`gcl_tf.schema`, imported: it is light).
Where the source cannot be read so, :func:`config_keys` returns None and only the full check,
after the import, applies.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import os

_PACKAGE = "gcl_tf"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds gcl_tf/


class _Unreadable(Exception):
    pass


def config_keys(module: str) -> list[str] | None:
    """The field names of ``module``'s ``Config`` in dataclass order, or None when they cannot
    be read from source."""
    try:
        return list(dict.fromkeys(_fields(module, "Config", depth=0)))
    except (_Unreadable, OSError, SyntaxError, ValueError):
        return None


def _source(module: str) -> ast.Module:
    if not module.startswith(_PACKAGE + "."):
        raise _Unreadable(module)
    base = os.path.join(_ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return ast.parse(handle.read(), path)
    raise _Unreadable(module)


def _fields(module: str, name: str, depth: int) -> list[str]:
    if depth > 8:
        raise _Unreadable(f"{module}.{name}")
    if module == f"{_PACKAGE}.schema":  # light: import it and ask the dataclass
        cls = getattr(importlib.import_module(module), name)
        return [field.name for field in dataclasses.fields(cls)]
    tree = _source(module)
    imports = _imported_names(tree, module)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            keys = []
            for base in node.bases:
                keys += _fields(*_resolve(base, imports, module), depth + 1)
            return keys + [stmt.target.id for stmt in node.body
                           if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                           and "ClassVar" not in ast.unparse(stmt.annotation)]
    if name in imports:  # re-exported: read it where it is defined
        return _fields(*imports[name], depth + 1)
    raise _Unreadable(f"{module}.{name}")


def _imported_names(tree: ast.Module, module: str) -> dict:
    """``{local name: (module, name)}`` of the module's ``from X import Y`` lines; a module
    imported as a name maps to ``(that module, None)``."""
    names = {}
    package = module if _source_is_package(module) else module.rpartition(".")[0]
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        origin = node.module or ""
        if node.level:
            parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            origin = f"{parent}.{origin}" if origin else parent
        for alias in node.names:
            names[alias.asname or alias.name] = (origin, alias.name)
    return names


def _source_is_package(module: str) -> bool:
    return os.path.isfile(os.path.join(_ROOT, *module.split("."), "__init__.py"))


def _resolve(base: ast.expr, imports: dict, module: str) -> tuple[str, str]:
    if isinstance(base, ast.Name):
        return imports.get(base.id, (module, base.id))
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id in imports:
        origin, imported = imports[base.value.id]  # `from gcl_tf.methods import er` ... `er.Config`
        return f"{origin}.{imported}", base.attr
    raise _Unreadable(ast.unparse(base))
