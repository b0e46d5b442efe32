"""What ``python -m gcl_tf.benchmark paper --dry-run`` prints: every planned run and whether it
is finished (or stopped with a checkpoint to resume from), the data each benchmark reads (and
whether it is there), and the time the rest should take, estimated from the finished runs' own
times."""
from __future__ import annotations

import glob
import os
from typing import NamedTuple

from gcl_tf import machine
from gcl_tf.benchmark import layout
from gcl_tf.io import read_json
from gcl_tf.run_layout import RESULTS, checkpoint_steps


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def data_needed(run) -> str:
    """What a benchmark's runs read (``run``: a :class:`gcl_tf.benchmark.paper.Run`), and whether it is there."""
    bench = run.config.benchmark
    if bench.source == "digits":
        return "scikit-learn's bundled digits (nothing to download)"
    if bench.source == "tfds":
        from gcl_tf.data.tfds_files import data_dir, prepared

        folder = data_dir(bench.path)
        state = ("prepared" if prepared(folder, bench.dataset)
                 else "not prepared: downloaded on first use, which needs the network")
        return f"TFDS {bench.dataset!r} in {folder} ({state})"
    from gcl_tf.config import missing_data_path  # the precheck's own rule (a file for npz, a folder else)

    missing = missing_data_path(bench)
    state = f"MISSING: set benchmark.path in {run.config_path} or --set" if missing else "present"
    return f"{bench.source} {bench.path} ({state})"


class Finished(NamedTuple):
    """A finished run's times as an estimate reads them."""

    seconds: float  # training and evaluation
    steps: int | None  # its training steps
    machine: dict | None  # the machine it ran on (results.json's ``machine``)
    folder: str


def _timing(folder: str) -> tuple:
    """``(seconds, train_steps, method, machine)`` of a finished run: its training and evaluation
    time, its steps, its method's name and the machine it ran on (gcl_tf/machine.py), from its
    results.json (each None when it lacks it)."""
    try:
        results = read_json(os.path.join(folder, RESULTS))
    except (OSError, ValueError):
        return None, None, None, None
    try:
        seconds = float(results["train_seconds"]) + float(results["eval_seconds"])
    except (KeyError, TypeError, ValueError):
        seconds = None
    steps = results.get("train_steps")
    method = results.get("method")
    return (seconds, (steps if isinstance(steps, int) and steps > 0 else None),
            method if isinstance(method, str) else None, results.get("machine"))


def dry_run(runs, output: str, finished) -> list[str]:
    """The lines of ``--dry-run``: each run and whether it is finished (``finished(run, folder)``,
    :func:`gcl_tf.benchmark.paper.finished`), the data each benchmark
    reads, the totals, and the time the rest should take, estimated from the finished runs' own
    times in ``output`` (a run to do takes the mean of the finished runs of its benchmark and
    variant, else of its benchmark and method, selected by this command or not; unknown without
    either). A stopped run with a checkpoint is "to resume from step N" (the suite goes on from
    there, nothing is lost); its estimate counts only the steps it has left, of as many as those
    finished runs trained."""
    lines, to_do = [], []  # to_do: (run, its last checkpoint's step, 0 if none)
    study_width = max([8] + [len(run.study) for run in runs])  # graph_lambda is 12 characters
    for run in runs:
        folder = layout.run_dir(output, run.benchmark, run.variant, run.seed)
        resumed = None if finished(run, folder) else (checkpoint_steps(folder) or [0])[-1]
        status = "finished" if resumed is None else f"to resume from step {resumed}" if resumed else "to run"
        lines.append(f"{run.benchmark:24s} {run.variant:44s} seed {run.seed}  {run.study:{study_width}s} {status}")
        if resumed is not None:
            to_do.append((run, resumed))
    seen = {}
    for run in runs:
        seen.setdefault(run.benchmark, data_needed(run))
    lines += [f"data: {benchmark}: {note}" for benchmark, note in seen.items()]
    stopped = sum(resumed > 0 for _, resumed in to_do)
    resuming = f" ({stopped} of them from a checkpoint)" if stopped else ""
    lines.append(f"{_count(len(runs), 'run')}: {len(runs) - len(to_do)} finished, {len(to_do)} to run{resuming}")
    if not to_do:
        return lines
    timed, by_variant, by_method = _finished_times(output)
    estimates, used = [], {}
    for run, resumed in to_do:
        times = by_variant.get((run.benchmark, run.variant)) or by_method.get((run.benchmark, run.method))
        if times:
            estimates.append(_estimate(times, resumed))
            used.update((t.folder, t.machine) for t in times)  # each finished run once
    if not estimates:
        lines.append(f"time to run: unknown (no finished run of the same benchmark and method in {output} "
                     "to estimate from)")
    elif len(estimates) == len(to_do):
        lines.append(f"time to run: about {_duration(sum(estimates))} (each run as long as the finished ones of its "
                     f"benchmark and variant, else method: {_count(timed, 'finished run')} in {output})")
    else:
        lines.append(f"time to run: about {_duration(sum(estimates))} for {len(estimates)} of the {len(to_do)} "
                     f"runs (from {_count(timed, 'finished run')} in {output}); unknown for the other "
                     f"{len(to_do) - len(estimates)} (no finished run of their benchmark and method)")
    note = other_machines_note(list(used.values()), machine.describe())
    if note:
        lines.append(note)
    return lines


def other_machines_note(used: list, here: dict) -> str | None:
    """A line when some of the finished runs an estimate comes from (their ``machine`` records,
    None where results.json has none) ran on another machine than ``here``: times differ between
    machines, by several times for the same step. None when every one ran on this kind of machine."""
    others = [m for m in used if machine.label(m) != machine.label(here)]
    if not others:
        return None
    return (f"note: the estimate reads {machine.where(others)}; this is {machine.label(here)}: times differ "
            "between machines (a running run's progress line gives this machine's)")


def _finished_times(output: str) -> tuple:
    """Every finished run in ``output`` with its times, whether this command selects it or not (a
    study's new variant is estimated from the method's main run): ``(count, {(benchmark, variant):
    [Finished]}, {(benchmark, method): [Finished]})``."""
    timed, by_variant, by_method = 0, {}, {}
    for path in sorted(glob.glob(os.path.join(output, layout.RUNS, "*", "*", "seed*", RESULTS))):
        folder = os.path.dirname(path)
        variant_dir = os.path.dirname(folder)
        benchmark, variant = os.path.basename(os.path.dirname(variant_dir)), os.path.basename(variant_dir)
        seconds, steps, method, ran_on = _timing(folder)
        if seconds is None:
            continue
        timed += 1
        finished = Finished(seconds, steps, ran_on, folder)
        by_variant.setdefault((benchmark, variant), []).append(finished)
        by_method.setdefault((benchmark, method or variant.split("-")[0]), []).append(finished)
    return timed, by_variant, by_method


def _estimate(times, resumed_step) -> float:
    """The seconds a run should take: the mean of ``times`` (:class:`Finished` runs), less the share
    of the steps a checkpoint of ``resumed_step`` already holds."""
    mean = sum(t.seconds for t in times) / len(times)
    steps = [t.steps for t in times if t.steps]
    if not resumed_step or not steps:
        return mean
    return mean * max(0.0, 1.0 - resumed_step / (sum(steps) / len(steps)))
