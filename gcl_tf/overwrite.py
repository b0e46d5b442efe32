"""What ``--overwrite`` may replace (issue 71): only what the command itself wrote, recognised by its
marker files, never a folder that holds anything else, and never a folder that is, holds or lies
inside the command's input (the run it reads, its data). Each refusal is one line naming what is
wrong and what is allowed; nothing here imports TensorFlow (the command lines check this first).

- :func:`check_apart`: ``path`` is not one of the inputs, under one, nor above one;
- :func:`check_replaceable`: an existing ``folder`` holds only the names the command writes and
  its marker (what :func:`foreign` lists otherwise).
"""
from __future__ import annotations

import fnmatch
import os

from gcl_tf.errors import UserError
from gcl_tf.run_layout import LOCK_FILE

SHOWN = 3  # foreign entries a message names


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_apart(path: str, inputs: dict, option: str) -> None:
    """A one-line UserError when ``path`` is one of ``inputs`` (``{its option or key: a path}``;
    None values skipped), lies inside one, or holds one: replacing or writing it would touch the
    input."""
    target = _real(path)
    for name, given in inputs.items():
        if not given:
            continue
        source = _real(given)
        if target == source:
            where = "is"
        elif _within(target, source):
            where = "is inside"
        elif _within(source, target):
            where = "holds"
        else:
            continue
        raise UserError(f"{option}: {path} {where} {name} {given}; allowed: a path outside {name}")


def foreign(folder: str, patterns) -> list[str]:
    """The entries of ``folder`` (its lock file left out) that match none of ``patterns``, sorted."""
    return sorted(name for name in os.listdir(folder)
                  if name != LOCK_FILE and not any(fnmatch.fnmatchcase(name, p) for p in patterns))


def check_replaceable(folder: str, option: str, what: str, patterns, markers) -> None:
    """``--overwrite`` may replace ``folder`` (``what`` the command wrote, e.g. "a run of
    gcl_tf.train"): missing, empty, or holding only names matching ``patterns`` and every name of
    ``markers``. A file, a folder holding anything else, or one without the markers: one line."""
    if not os.path.lexists(folder):
        return
    if not os.path.isdir(folder) or os.path.islink(folder):
        raise UserError(f"{option}: {folder} is a file, not {what}; --overwrite replaces only {what}; "
                        "allowed: a new folder or such a one")
    others = foreign(folder, patterns)
    if others:
        shown = ", ".join(others[:SHOWN]) + (f" and {len(others) - SHOWN} more" if len(others) > SHOWN else "")
        raise UserError(f"{option}: {folder} holds {shown}, which --overwrite would not replace: it replaces only "
                        f"{what}; allowed: a new folder, or one holding only such")
    held = [name for name in os.listdir(folder) if name != LOCK_FILE]
    missing = [m for m in markers if m not in held]
    if held and missing:
        raise UserError(f"{option}: {folder} holds no {missing[0]}, so it is not {what}; --overwrite replaces "
                        "only such; allowed: a new folder, or one written by that command")
