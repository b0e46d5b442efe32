"""Speed measurements: ``python -m gcl_tf.benchmark throughput [--output DIR]`` runs the throughput
benchmark of the paper's method (the ``lead`` of paper_suite.yaml), part of its speed checks,
``gcl_tf/speed/<lead>/throughput.py`` (GCL's: its step and evaluation against the matmul
rate, their analytic FLOPs and the plain PyTorch step; docs/performance.md). The options and the
report are that module's (``--help``)."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from gcl_tf.errors import exit_on_user_error  # noqa: E402


@exit_on_user_error
def main(argv=None) -> int:
    """The lead method's ``throughput`` command (:func:`gcl_tf.speed.lead_main`)."""
    from gcl_tf import speed

    return speed.lead_main("throughput", argv)


if __name__ == "__main__":
    sys.exit(main())
