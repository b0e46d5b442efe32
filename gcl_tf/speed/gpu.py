"""The GPU check: ``python -m gcl_tf.benchmark gpu --output DIR`` runs the GPU check of the paper's
method (the ``lead`` of paper_suite.yaml), part of its speed checks,
``gcl_tf/speed/<lead>/gpu.py`` (GCL's: speed with XLA and mixed precision against the
plain PyTorch step, placement on the devices, a mirrored continual run; docs/gpu.md). The options
and the report are that module's (``--help``)."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from gcl_tf.errors import exit_on_user_error  # noqa: E402


@exit_on_user_error
def main(argv=None) -> int:
    """The lead method's ``gpu`` command (:func:`gcl_tf.speed.lead_main`)."""
    from gcl_tf import speed

    return speed.lead_main("gpu", argv)


if __name__ == "__main__":
    sys.exit(main())
