"""The faults a long run meets on a shared machine (see docs/reliability.md):

- :func:`exclusive`: one process at a time in an output folder, by an ``fcntl.flock`` lock on
  ``DIR/gcl_tf.lock`` held for the run's whole life. The operating system releases it when the
  process ends however it ends, so a killed run never leaves a stale lock (the file stays; it is
  the lock on it that counts).
- :class:`StopSignals`: SIGTERM (schedulers, cloud preemption) and Ctrl-C (SIGINT) only set a
  flag, which the training loop reads between steps to save a checkpoint and stop; a second
  signal acts as it would have without this (stops at once).
- :func:`disk_error`: a write that failed (a full disk, an I/O error, no permission) as one line;
  :func:`check_writable`: an output folder that cannot be one (a file, under a file, not writable),
  said before anything is written.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import tempfile
import threading

from gcl_tf.errors import DiskError, FolderBusy, UserError
from gcl_tf.run_layout import LOCK_FILE, checkpoint_steps

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


# ----------------------------------------------------------------------------- a full disk
def _write_hint(code) -> str:
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "free space on its disk"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "make the folder writable"
    return "check the disk"


def disk_error(path: str, error: BaseException, then: str = "") -> DiskError:
    """A one-line :class:`DiskError` for a failed write of ``path`` (an OSError, or one of
    TensorFlow's errors, which carry the system's message in their text)."""
    reason = getattr(error, "strerror", None) or str(error).strip().splitlines()[-1].split("; ")[-1]
    reason = reason.split(" [Op:")[0]
    code = getattr(error, "errno", None)
    if code is None and "No space left" in reason:
        code = errno.ENOSPC
    hint = f"{_write_hint(code)}, {then}" if then else _write_hint(code)
    fault = DiskError(f"cannot write {path}: {reason}; {hint}")
    fault.errno = code
    return fault


# ----------------------------------------------------------------------------- one run per folder
def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode(errors="replace").strip()
    return f"pid {text}" if text.isdigit() else "a process starting up"


def _busy(folder: str, path: str, holder: str, option: str) -> FolderBusy:
    return FolderBusy(f"{folder} is in use by another run ({holder} holds {path}); wait for it to end, stop it, "
                      f"or choose another {option}")


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def check_writable(folder: str, option: str = "--output") -> None:
    """A one-line :class:`UserError` unless ``folder`` can be an output folder: a folder, or a
    path whose nearest existing parent is one this process can create folders in (a probe folder
    is created there and removed at once: the operating system answers, whatever the file
    system; /proc, say, takes none). Nothing is left behind."""
    path = os.path.abspath(folder)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UserError(f"{option}: {folder} is a file, not a folder; allowed: a new or existing folder")
    existing = _nearest_existing(path)
    if not os.path.isdir(existing):
        raise UserError(f"{option}: {folder} cannot be a folder: {existing} is a file; allowed: a path whose "
                        "parents are folders")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".gcl_tf-probe-", dir=existing))
    except OSError as error:
        where = "it" if existing == path else existing
        raise DiskError(f"{option}: {folder} cannot be written: {where} takes no new folder ({error.strerror}); "
                        "allowed: a folder on a writable disk") from None


def check_free(folder: str, option: str = "--output") -> None:
    """A :class:`FolderBusy` when another process holds the lock of ``folder`` (as
    :func:`exclusive` would say); the lock is neither kept nor created."""
    path = os.path.join(folder, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:  # no lock file: nobody holds it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        raise _busy(folder, path, _holder(fd), option) from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(folder: str, option: str = "--output"):
    """Hold the lock of ``folder`` (created if missing) for the ``with`` block; a one-line
    :class:`FolderBusy` naming the holder's pid when another process holds it."""
    path = os.path.join(folder, LOCK_FILE)
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as error:
        check_writable(folder, option)  # a file, under a file, a disk that takes no folder: said as such
        raise disk_error(path, error, f"or choose another {option}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(folder, path, _holder(fd), option) from None
        with contextlib.suppress(OSError):  # the pid only informs; a full disk is reported by the run's writes
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def undo_unsaved_run(folder: str):
    """Around a run from before it holds ``folder``: when it fails before its first checkpoint,
    remove what it created there (the folder itself when it created it; else the entries it
    added) and, when it wrote more than its lock, say so at the end of its one-line error. A
    folder with a checkpoint keeps everything (a run resumed, or one that saved)."""
    existed = os.path.isdir(folder)
    before = set(os.listdir(folder)) if existed else set()
    try:
        yield
    except Exception as error:
        if not os.path.isdir(folder) or checkpoint_steps(folder):
            raise
        import shutil

        added = sorted(set(os.listdir(folder)) - before)
        for name in [] if not existed else added:
            path = os.path.join(folder, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
        wrote = set(added if existed else os.listdir(folder)) - {LOCK_FILE}  # the lock: no output of a run
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        removed = folder if not existed else ", ".join(added)
        if isinstance(error, UserError) and wrote:
            error.args = (f"{error}; removed what the run wrote ({removed}): it stopped before its first "
                          "checkpoint, so nothing of it was worth keeping", *error.args[1:])
        raise


def entries(folder: str) -> list[str]:
    """What ``folder`` holds, its lock file left out."""
    return [name for name in os.listdir(folder) if name != LOCK_FILE]


# ----------------------------------------------------------------------------- preemption
class StopSignals:
    """``with StopSignals() as stop:`` SIGTERM and SIGINT set ``stop.received`` (the signal's
    number) instead of ending the process; the training loop reads it between steps. A second
    signal restores the previous handler and acts as before (Ctrl-C twice stops at once). The
    previous handlers come back when the block ends. Off the main thread (where Python cannot
    install handlers) or with ``enabled=False`` it does nothing."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.received = None
        self._previous = {}

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signum
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        signal.signal(signum, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signum)

    def __enter__(self):
        if self.enabled:
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        return False

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""
