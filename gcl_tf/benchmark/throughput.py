"""Speed measurements: ``python -m gcl_tf.benchmark throughput [--output DIR]`` runs the throughput
benchmark of the paper's method (the ``lead`` of paper_suite.yaml), part of its speed checks,
``gcl_tf/speed/<lead>/throughput.py`` (GCL's: its step and evaluation against the matmul
rate, their analytic FLOPs and the plain PyTorch step; docs/performance.md). The options and the
report are that module's (``--help``)."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from gcl_tf.benchmark import speed  # noqa: E402


def main(argv=None) -> int:
    return speed.run("throughput", argv)


if __name__ == "__main__":
    sys.exit(main())
