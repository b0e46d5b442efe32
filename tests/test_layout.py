"""The package's structure: the imports between its top-level modules and packages (function-local
imports and ``importlib.import_module`` of a name too) form no loop, so each can be read knowing
only what it builds on."""
import ast
import os

from conftest import REPO
from helpers import dynamic_imports

PACKAGE = os.path.join(REPO, "gcl_tf")


def room(module: str):
    """``gcl_tf.methods.gcl.model`` -> ``methods``; None outside the package or for its face."""
    parts = module.split(".")
    return parts[1] if parts[0] == "gcl_tf" and len(parts) > 1 else None


def imports_between_rooms() -> dict:
    """``{room: {room it imports: "file:line"}}`` over every .py file but the package's faces:
    gcl_tf/__init__.py (it only names what the rooms define, imported on first use) and each
    ``__main__.py`` (a program's entry, imported by no module: ``python -m gcl_tf.benchmark``
    dispatches to the benchmark's commands and the speed checks' above it)."""
    edges = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or name == "__main__.py" or path == os.path.join(PACKAGE, "__init__.py"):
                continue
            module = "gcl_tf." + os.path.relpath(path, PACKAGE)[:-3].replace(os.sep, ".")
            source = room(module.removesuffix(".__init__"))
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            found = dynamic_imports(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found += [(alias.name, node.lineno) for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found += [(node.module, node.lineno)] if node.module != "gcl_tf" else [
                        (f"gcl_tf.{a.name}", node.lineno) for a in node.names]
            for target, line in found:
                target = room(target)
                if target is not None and target != source:
                    edges.setdefault(source, {}).setdefault(target, f"{os.path.relpath(path, REPO)}:{line}")
    return edges


def find_loop(edges: dict):
    """A loop of rooms (each importing the next) as a list, or None."""
    state = {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in edges.get(node, {}):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state:
                loop = visit(nxt, trail + [nxt])
                if loop:
                    return loop
        state[node] = "done"
        return None

    for start in sorted(edges):
        if start not in state:
            loop = visit(start, [start])
            if loop:
                return loop
    return None


def test_no_import_runs_back_up_between_the_package_rooms():
    edges = imports_between_rooms()
    assert "methods" in edges and "config" in edges["train"]  # the graph was read
    loop = find_loop(edges)
    where = [edges[a][b] for a, b in zip(loop, loop[1:])] if loop else []
    assert loop is None, f"imports loop: {' -> '.join(loop)} ({', '.join(where)})"


def test_the_layering_sees_a_module_imported_by_name():
    """``importlib.import_module`` of a name counts as an import (a room reached that way is no
    longer hidden from the test above)."""
    tree = ast.parse("import importlib\ndef f(x):\n    importlib.import_module('gcl_tf.speed')\n"
                     "    return importlib.import_module(f'gcl_tf.data.{x}')\n")
    assert dynamic_imports(tree) == [("gcl_tf.speed", 3), ("gcl_tf.data", 4)]


def test_tables_label_and_order_methods_as_their_classes_and_the_registry_say():
    """A new method needs no line in gcl_tf/benchmark/layout.py: its row follows its registry
    line and its label is its class's; the paper's rows keep the paper's order, GCL last."""
    from gcl_tf import methods
    from gcl_tf.benchmark.layout import method_label, method_sort_key

    names = methods.names()
    assert sorted(["unknown", *reversed(names)], key=method_sort_key) == [*names, "unknown"]
    paper = ["finetune", "ewc", "icarl", "gem", "agem", "er", "mer", "gcl"]
    assert [name for name in names if name in paper] == paper and names[-1] == "gcl"
    for name in names:
        cls = methods.method_class(name)
        assert method_label(name) == (cls.label or cls.__name__)
    assert [method_label(n) for n in ("icarl", "agem", "derpp", "er_ace", "mir")] == [
        "iCaRL", "A-GEM", "DER++", "ER-ACE", "MIR"]
    assert method_label("unknown") == "unknown"
