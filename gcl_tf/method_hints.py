"""What a config asks of a method that it does not have, said before TensorFlow loads (issue 71):
``method.graph_lambda=10`` with ER is a key of another method, not an unknown one
(:func:`of_another_method`); ``benchmark.augment: ocl`` with a method that does not augment inside
its step is refused by :func:`precheck`, reading the class's ``augments_in_step`` from its source."""
from __future__ import annotations

import ast
import os

from gcl_tf import methods
from gcl_tf.errors import ConfigError
from gcl_tf.methods.keys import key_fields


def _keys(config_class) -> list[str]:
    return [f.name for f in key_fields(config_class)]


def of_another_method(error: ConfigError, name: str, section: dict, config_class) -> ConfigError:
    """``error`` (building method ``name``'s section) as the key of another method it is, when a
    key of ``section`` belongs to other methods and not to ``name``; else ``error`` itself.
    ``config_class(name)``: a method's ``Config`` (read without TensorFlow before it loads)."""
    own = _keys(config_class(name))
    for key in section:
        if key == "name" or key in own:
            continue
        owners = [m for m in methods.names() if m != name and key in _keys(methods.read_config(m))]
        if owners:
            switch = f", or method.name={owners[0]}" if len(owners) == 1 else ""
            return ConfigError(f"method.{key}: a key of {', '.join(owners)}; the method is {name}, which has no "
                               f"such key; allowed: {name}'s keys ({', '.join(own) or 'none'}){switch}")
    return error


# ----------------------------------------------------------------------------- before TensorFlow
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds the gcl_tf package


def _tree(module: str):
    base = os.path.join(_ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return ast.parse(handle.read(), path), path.endswith("__init__.py")
    return None, False


def _bindings(tree, module: str, package: bool) -> dict:
    """``{name: (module, attribute or None)}`` the module's ``from ... import`` statements bind."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            parts = module.split(".") if package else module.split(".")[:-1]
            source = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            for alias in node.names:
                out[alias.asname or alias.name] = (source, alias.name)
    return out


def _class_says(module: str, name: str, flag: str, depth: int = 0) -> bool:
    """Whether class ``name`` of ``module`` (or a class it derives from) sets ``flag = True``, read
    from the sources without importing them (which imports TensorFlow)."""
    tree, package = _tree(module)
    if tree is None or depth > 6:
        return False
    bound = _bindings(tree, module, package)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if node is None:  # re-exported: follow the import
        source, attribute = bound.get(name, (None, None))
        return source is not None and _class_says(source, attribute, flag, depth + 1)
    for statement in node.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == flag for t in targets) and isinstance(statement.value, ast.Constant):
            return bool(statement.value.value)
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in bound:
            if _class_says(*bound[base.id], flag, depth + 1):
                return True
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id in bound:
            source, attribute = bound[base.value.id]
            if _class_says(f"{source}.{attribute}", base.attr, flag, depth + 1):
                return True
    return False


def augmenting(name: str) -> bool:
    """Whether method ``name`` takes an in-step augmentation (its class's ``augments_in_step``)."""
    return _class_says(*methods.REGISTRY[name], "augments_in_step")


def precheck(config) -> None:
    """The rule between a method and ``benchmark.augment`` that its class states (an in-step
    augmentation only for a method that augments inside its step), before TensorFlow loads."""
    from gcl_tf.data.config import IN_STEP_AUGMENTATIONS

    augment, name = config.benchmark.augment, config.method.name
    if augment in IN_STEP_AUGMENTATIONS and augment != "none" and not augmenting(name):
        others = ", ".join(m for m in methods.names() if augmenting(m))
        raise ConfigError(f"benchmark.augment: {augment} is applied inside the training step, which {name} does "
                          f"not augment; allowed: none or flip with {name} (in-step augmentation is for {others})")
