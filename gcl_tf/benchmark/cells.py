"""A table's cells and files: mean ± std over seeds, paired changes, Markdown and CSV text."""
from __future__ import annotations

import csv
import io

import numpy as np

from gcl_tf.benchmark import layout

METRICS = (("acc", "ACC (↑)"), ("fgt", "FGT (↓)"))


def fmt(mean: float, std: float, n: int, full_n: int | None = None, show_n: bool = False) -> str:
    """``82.36 ± 0.36``; ``-`` without runs; the seed count when it differs from the table's
    (``show_n``: always)."""
    if n == 0 or not np.isfinite(mean):
        return "-"
    text = f"{mean:.2f}" if not np.isfinite(std) else f"{mean:.2f} ± {std:.2f}"
    if show_n or (full_n is not None and n != full_n):
        text += f" (n={n})"
    return text


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: list[str], rows: list[list]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def num(value: float) -> str:
    return "" if value is None or not np.isfinite(value) else repr(float(value))


def fmt_change(mean: float, se: float, n: int) -> str:
    """``-0.22 ± 1.10 (s.e., 3 seeds)``: a paired difference; ``-`` without pairs."""
    if n == 0 or not np.isfinite(mean):
        return "-"
    if not np.isfinite(se):
        return f"{mean:+.2f} (1 seed)"
    return f"{mean:+.2f} ± {se:.2f} (s.e., {n} seeds)"


def change_vs_full(full: list, runs: list, key: str) -> tuple[float, float, int]:
    """A variant's change of ``key`` against full GCL, paired by seed (the seeds both ran)."""
    by_seed = {r.seed: r.results.get(key) for r in full}
    return layout.paired_difference([(by_seed[r.seed], r.results.get(key)) for r in runs if r.seed in by_seed])
