"""Benchmarks: ``python -m gcl_tf.benchmark <command> ...``.

- ``paper``: run the paper's experiments (resumable) and write its tables and figures (paper.py);
- ``plots``: redraw every table and figure of a suite from its saved results (plots.py);
- ``throughput``: speed measurements; ``gpu``: the GPU check.

``layout.py`` fixes where a suite keeps its runs, tables and figures; ``selection.py`` checks what
``paper`` is asked to run; ``tables.py`` and ``study_tables.py`` build the tables from the saved
results (cells as ``cells.py`` writes them), ``plots.py`` the figures (``styles.py``: each method's
colour and marker). ``throughput`` and ``gpu`` run the speed checks of the paper's method, which
live with it (gcl_tf/speed/; ``speed.py`` finds them through the registry);
``timing.py``, ``flops.py``, ``workloads.py`` and ``gpu_*.py`` are the generic machinery they use,
naming no method.
"""
