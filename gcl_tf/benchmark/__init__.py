"""Benchmarks: ``python -m gcl_tf.benchmark <command> ...``.

- ``paper``: run the paper's experiments (resumable) and write its tables and figures (paper.py);
- ``plots``: redraw every table and figure of a suite from its saved results (plots.py);
- ``throughput``: speed measurements (throughput.py, when present).

``layout.py`` fixes where a suite keeps its runs, tables and figures; ``selection.py`` checks what
``paper`` is asked to run; ``tables.py`` and ``study_tables.py`` build the tables from the saved
results (cells as ``cells.py`` writes them), ``plots.py`` the figures (``styles.py``: each method's
colour and marker). ``timing.py``, ``flops.py`` and ``workloads.py`` serve the speed
measurements (``throughput`` and the GPU check, ``gpu``: gpu.py and its parts, ``gpu_*.py``).
"""
