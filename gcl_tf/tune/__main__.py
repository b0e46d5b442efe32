"""``python -m gcl_tf.tune``: see :mod:`gcl_tf.tune`."""
import sys

from gcl_tf.tune import main

sys.exit(main())
