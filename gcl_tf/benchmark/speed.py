"""The speed commands (``throughput``, ``gpu``) run the speed checks of the paper's method, its
``lead`` in paper_suite.yaml (roles.py), found through the registry: its package
``gcl_tf.speed.<lead>`` (gcl_tf/speed/__init__.py says what it holds). This module
names no method; the lead's package is imported without TensorFlow, so that ``--help`` and a
mistake on the command line are answered in a fraction of a second."""
from __future__ import annotations

from gcl_tf.errors import exit_on_user_error


@exit_on_user_error
def run(command: str, argv=None) -> int:
    """``main(argv)`` of the lead method's speed command ``command``."""
    import importlib

    from gcl_tf.benchmark import roles

    # The speed checks are plug-ins above this package (they use its machinery): found by name, as
    # __main__ finds its commands, so that no import runs back up (tests/test_layout.py).
    speed = importlib.import_module("gcl_tf.speed")
    return speed.command(roles.LEAD, command).main(argv)
