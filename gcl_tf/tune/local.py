"""``python -m gcl_tf.tune --workers N``: one search's trials in N processes on this machine.

KerasTuner's distributed mode does the sharing: this process becomes the chief (it serves the
oracle on 127.0.0.1 and a free port, holds the search folder's lock and writes the report) and
starts N worker processes, the same command with ``KERASTUNER_TUNER_ID=tuner0 .. tunerN-1``, which
ask it for trials. Each worker gets ``cores // N`` intra-op threads (``TF_NUM_INTRAOP_THREADS``,
unless set): small trials (an MLP at batch 10) spend most of a step in Python and dispatch, so N
of them share the cores better than one uses them all.

A worker that fails (its trial failed to start, it was killed) stops the search: the chief
would otherwise wait for it forever. SIGTERM or Ctrl-C stop the chief and the workers; the same
command resumes the search, as a single process's does (finished trials are kept).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

from gcl_tf.errors import Stopped, UserError

ENV_KEYS = ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Intra-op threads for each of ``workers`` processes sharing ``cores`` (at least 1)."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // workers)


def worker_command(args, output_dir: str) -> list[str]:
    """The worker's command line: the chief's, with its folder made absolute and without the
    chief's own options (``--workers``, ``--overwrite``)."""
    command = [sys.executable, "-m", "gcl_tf.tune", "--config", os.path.abspath(args.config),
               "--output", os.path.abspath(output_dir), "--verbose", str(args.verbose)]
    if args.tuner:
        command += ["--tuner", args.tuner]
    if args.max_trials is not None:
        command += ["--max-trials", str(args.max_trials)]
    for override in args.overrides:
        command += ["--set", override]
    return command


def check_alone(workers: int) -> None:
    if workers > 1 and any(os.environ.get(key) for key in ENV_KEYS):
        raise UserError(f"--workers {workers} starts its own chief and workers, but "
                        f"{', '.join(k for k in ENV_KEYS if os.environ.get(k))} is set; allowed: "
                        f"--workers 1 in a distributed search you start yourself, or unset those variables")


class Workers:
    """The worker processes of a local search, watched: the first that fails sends SIGTERM to
    the chief's main thread (:func:`run` handles it: it raises there), and :meth:`stop` ends the
    others."""

    def __init__(self, command: list[str], count: int, port: int):
        threads = threads_per_worker(count)
        self.failed: tuple[str, int] | None = None
        self.processes = {}
        for index in range(count):
            name = f"tuner{index}"
            env = dict(os.environ, KERASTUNER_TUNER_ID=name, KERASTUNER_ORACLE_IP="127.0.0.1",
                       KERASTUNER_ORACLE_PORT=str(port))
            env.setdefault("TF_NUM_INTRAOP_THREADS", str(threads))
            # Their own process group: Ctrl-C reaches the chief, which stops them in order.
            self.processes[name] = subprocess.Popen(command, env=env, start_new_session=True)
        self._done = threading.Event()
        self._lock = threading.Lock()  # the watcher signals the chief only while stop() has not begun
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            for name, process in self.processes.items():
                code = process.poll()
                if code not in (None, 0):
                    with self._lock:
                        if self._done.is_set():
                            return  # stop() ended it (its SIGTERM), not a failure
                        self.failed = (name, code)
                        self._done.set()
                        # SIGTERM to the main thread, whose handler (run's _raise_stopped) raises there.
                        # Not _thread.interrupt_main(): it simulates SIGINT, which does nothing where
                        # SIGINT is ignored (a background job of a script, a test runner's worker), and
                        # the chief would wait for the failed worker forever.
                        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
                    return
            if all(p.poll() is not None for p in self.processes.values()):
                return

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM to the running workers (a trial stops at its next step and is run again on
        resume), then SIGKILL after ``timeout`` seconds. The watcher stops first: the workers'
        exits are no failures, and no SIGTERM reaches the chief once run() restores its handler."""
        with self._lock:
            self._done.set()
        self._watcher.join()
        running = [p for p in self.processes.values() if p.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _raise_stopped(signum, frame):
    raise Stopped(f"{signal.Signals(signum).name} received: the workers are stopped (a trial they were running "
                  f"runs again on resume)", signum)


def run(args, plan, run_search) -> int:
    """Run the search ``plan`` as the chief of ``args.workers`` local workers; returns the exit
    status (a failed worker's own). The workers start once the chief holds the folder, checked
    (and cleared for ``--overwrite``) by ``run_search`` (:func:`gcl_tf.tune.run_search`)."""
    plan.benchmark_for(plan.base)  # the data, once, before the workers load it
    plan.local_workers = args.workers
    port = free_port()
    os.environ.update(KERASTUNER_TUNER_ID="chief", KERASTUNER_ORACLE_IP="127.0.0.1",
                      KERASTUNER_ORACLE_PORT=str(port))
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    started = []

    def start_workers():
        started.append(Workers(worker_command(args, plan.output_dir), args.workers, port))

    try:
        try:
            run_search(plan, overwrite=args.overwrite, on_ready=start_workers)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM (Stopped) or a failed worker
            if not started or started[0].failed is None:
                raise
            name, code = started[0].failed
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
            print(f"worker {name} {how} (its messages are above); the search stopped: "
                  f"run the same command again (without --overwrite) to resume it", file=sys.stderr, flush=True)
            return code if code > 0 else 128 - code
        return 0
    finally:
        for workers in started:
            workers.stop()
        signal.signal(signal.SIGTERM, previous)
        for key in ENV_KEYS:
            os.environ.pop(key, None)
