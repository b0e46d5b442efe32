"""The import block of a generated stub (gcl_tf/methods/stubs.py): the imports its text uses,
sorted and wrapped as the project's linter (ruff's isort rules, pyproject.toml) wants them."""
from __future__ import annotations

import ast
import sys

_FIRST_PARTY = "gcl_tf"
_LINE = 120


class Imports:
    """The imports a stub may use: those of its module (:meth:`add_statement`) and those the
    generator needs (:meth:`add_from`, always kept)."""

    def __init__(self):
        self._known = {}  # local name -> (module, name or None for ``import module``, local name)
        self._kept = set()  # (module, name, local name)

    def add_statement(self, node) -> None:
        """Remember what a module's import statement binds."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                self._known[local] = (alias.name if alias.asname else local, None, local)
        elif node.module != "__future__":
            for alias in node.names:
                self._known[alias.asname or alias.name] = (node.module, alias.name, alias.asname or alias.name)

    def add_from(self, module: str, name: str) -> None:
        """Keep ``from module import name``."""
        self._kept.add((module, name, name))

    def keep_used(self, stub: ast.Module, exported=frozenset()) -> None:
        """Keep the module's imports that the stub's text uses; those of ``exported`` are re-exported
        (``from m import X as X``: a stub re-exports no other import)."""
        used = {node.id for node in ast.walk(stub) if isinstance(node, ast.Name)}
        for local, (module, name, _) in self._known.items():
            if local in exported:
                self._kept.add((module, name, f"{local} as {local}"))
            elif local in used:
                self._kept.add((module, name, local))

    def text(self) -> str:
        """The import block: sections (standard library, third party, the package) apart, in each
        ``import x`` lines before ``from x import y`` ones, modules and names in isort's order."""
        sections = {}
        for module, name, local in self._kept:
            sections.setdefault(_section(module), set()).add((module, name, local))
        blocks = [_section_text(sections[s]) for s in sorted(sections)]
        return "\n".join(blocks)


def _section(module: str) -> int:
    top = module.split(".")[0]
    if top == _FIRST_PARTY:
        return 2
    return 0 if top in sys.stdlib_module_names else 1


def _section_text(entries) -> str:
    straight = sorted((module, local) for module, name, local in entries if name is None)
    lines = [f"import {module}" + (f" as {local}" if local != module.split(".")[0] else "")
             for module, local in sorted(straight, key=lambda e: _module_key(e[0]))]
    grouped, aliased = {}, []
    for module, name, local in entries:
        if name is None:
            continue
        if " as " in local:
            aliased.append((module, f"{name} as {local.split(' as ')[1]}"))
        else:
            grouped.setdefault(module, []).append(name if name == local else f"{name} as {local}")
    froms = [(module, names) for module, names in grouped.items()] + [(m, [n]) for m, n in aliased]
    for module, names in sorted(froms, key=lambda e: (_module_key(e[0]), " as " in e[1][0])):
        lines.append(_from_line(module, sorted(set(names), key=_member_key)))
    return "".join(line + "\n" for line in lines)


def _from_line(module: str, names: list) -> str:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= _LINE:
        return line
    return f"from {module} import (\n" + "".join(f"    {name},\n" for name in names) + ")"


def _module_key(module: str):
    return module.lower(), module


def _member_key(name: str):
    """isort's ``order-by-type``: constants, then classes, then the rest; each in lower-case order."""
    bare = name.split(" as ")[0]
    kind = 0 if bare.isupper() and len(bare) > 1 else 1 if bare[:1].isupper() else 2
    return kind, bare.lower(), bare
