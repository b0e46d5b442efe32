"""``python -m gcl_tf.benchmark <command> [args...]``: dispatch to a subcommand module.

A subcommand is a module with ``main(argv=None) -> int`` (its own argparse,
``prog="python -m gcl_tf.benchmark <command>"``), imported when it is chosen: ``gcl_tf.benchmark.<command>``,
or for the speed commands ``gcl_tf.speed.<command>`` (they run the lead method's speed checks, a
room above this package). This module is the program's entry, imported by no module, so it may
reach any room (tests/test_layout.py).
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import importlib
import sys

from gcl_tf.errors import USAGE_EXIT_CODE

# command: (module, one line of help)
COMMANDS = {
    "paper": ("gcl_tf.benchmark.paper", "run the paper's experiments (resumable) and write its tables and figures"),
    "plots": ("gcl_tf.benchmark.plots",
              "redraw every table and figure of a suite from its saved results (no training)"),
    "presets": ("gcl_tf.benchmark.presets", "check that every config's presets learn on a short stream of real data"),
    "throughput": ("gcl_tf.speed.throughput", "speed measurements (docs/performance.md)"),
    "gpu": ("gcl_tf.speed.gpu",
            "the GPU check: speed with XLA and mixed precision, placement, a mirrored run (docs/gpu.md)"),
}


def usage() -> str:
    lines = ["usage: python -m gcl_tf.benchmark <command> [args...]", "", "commands:"]
    lines += [f"  {name:12s} {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "python -m gcl_tf.benchmark <command> --help shows a command's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return USAGE_EXIT_CODE
    if argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return USAGE_EXIT_CODE
    return importlib.import_module(COMMANDS[command][0]).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
