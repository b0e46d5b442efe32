"""Benchmarks: ``python -m gcl_tf.benchmark <command> ...``.

- ``paper``: run the paper's experiments (resumable) and write its tables and figures (paper.py);
- ``plots``: redraw every table and figure of a suite from its saved results (plots.py);
- ``throughput``: speed measurements (throughput.py, when present).

``layout.py`` fixes where a suite keeps its runs, tables and figures; ``tables.py`` builds the
tables from the saved results. ``timing.py``, ``flops.py`` and ``workloads.py`` serve the speed
measurements (``throughput`` and the GPU check, ``gpu``: gpu.py and its parts, ``gpu_*.py``).
"""
