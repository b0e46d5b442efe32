"""Import TensorFlow without its start-up chatter on stderr.

TensorFlow 2.21 logs a few INFO lines (oneDNN, CUDA drivers) while its shared libraries load,
before ``TF_CPP_MIN_LOG_LEVEL`` is read, so a one-line user error would be buried under them.
The command-line entry points import TensorFlow through :func:`import_tensorflow` first, and the
Python API's first import of TensorFlow goes through :func:`quiet_import` (gcl_tf/import_hooks.py):
stderr is captured during the import and replayed without those INFO lines (everything else, and
all of it when ``TF_CPP_MIN_LOG_LEVEL`` is 0, is kept).

Both also choose TensorFlow's CPU kernels before its first import (:func:`choose_cpu_kernels`):
oneDNN on x86 CPUs unless ``TF_ENABLE_ONEDNN_OPTS`` is set. A TensorFlow imported before gcl_tf
keeps whatever it started with (TensorFlow reads the variable once); when that is oneDNN off
where gcl_tf would have turned it on, ``import gcl_tf`` says so in one line
(:func:`note_import_order`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import sys
import tempfile

# absl INFO lines ("I0000 00:00:1795642126.868266    7529 port.cc:153] ...") and absl's notice
# that logging is not initialised yet.
_NOISE = re.compile(
    r"^(I\d{4} [\d:.]+\s+\d+ \S+:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR\s*$"
    # on a machine without a GPU, the CUDA runtime's failed probe when devices are first listed
    r"|E\d{4} [\d:.]+\s+\d+ cuda_platform\.cc:\d+\] failed call to cuInit)"
)
_capturing = False  # a capture is under way (an import inside another one is captured once)

#: Processors where gcl_tf turns TensorFlow's oneDNN kernels on when the user has not chosen
#: (``platform.machine()`` names). TensorFlow's x86 build enables oneDNN by itself only on CPUs with
#: AVX-512 neural-network features (VNNI, BF16, AMX); on the AVX2-only CPUs it leaves them off,
#: where the ConvNet GCL step is 1.6x faster with them on and the MLP step unchanged
#: (docs/performance.md#onednn-on-every-x86-cpu). Not on ARM: TensorFlow chooses its ACL-backed
#: oneDNN there itself and it has not been measured here.
ONEDNN_MACHINES = frozenset({"x86_64", "AMD64", "amd64", "i686", "i386"})


def onednn_setting(environ, machine: str) -> str | None:
    """The value gcl_tf gives ``TF_ENABLE_ONEDNN_OPTS`` before TensorFlow is imported: ``"1"`` on
    an x86 ``machine`` when ``environ`` does not set it, else None (a user's setting, even an
    empty one, always wins; other processors keep TensorFlow's own choice)."""
    if "TF_ENABLE_ONEDNN_OPTS" in environ or machine not in ONEDNN_MACHINES:
        return None
    return "1"


def choose_cpu_kernels(environ=None) -> None:
    """Set ``TF_ENABLE_ONEDNN_OPTS`` by :func:`onednn_setting`; call before TensorFlow's first
    import (TensorFlow reads it once, when its kernels load)."""
    environ = os.environ if environ is None else environ
    value = onednn_setting(environ, platform.machine())
    if value is not None:
        environ["TF_ENABLE_ONEDNN_OPTS"] = value


def onednn_enabled() -> bool | None:
    """Whether the TensorFlow of this process runs its oneDNN kernels (whatever chose it: gcl_tf,
    the user's ``TF_ENABLE_ONEDNN_OPTS`` or TensorFlow's own default); None when this TensorFlow
    cannot say. A run records it (``results.json``): oneDNN changes the order of floating-point
    sums, so two runs of one config differ in it as two seeds do (docs/performance.md)."""
    try:  # a private module of TensorFlow's: a version without it (or its function) cannot say
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


_noted = False  # the import-order line is said once a process


def onednn_off_note(environ, machine: str, enabled) -> str | None:
    """The line to say when TensorFlow was imported before gcl_tf (``enabled``: whether it runs
    oneDNN, :func:`onednn_enabled`) where gcl_tf would have turned oneDNN on and it is off
    (TensorFlow's own default on x86 CPUs without AVX-512's neural-network features; on those
    with them TensorFlow turns it on itself, and nothing is said); None otherwise, and when the
    user chose (``TF_ENABLE_ONEDNN_OPTS`` set) or TensorFlow cannot say."""
    if onednn_setting(environ, machine) is None or enabled is not False:
        return None
    return ("gcl_tf: TensorFlow was imported before gcl_tf and runs without its oneDNN CPU kernels (its default on "
            "this CPU; a convolutional step measured 1.5x slower so); set TF_ENABLE_ONEDNN_OPTS=1 in the environment "
            "before Python starts, or import gcl_tf first (docs/performance.md)")


def note_import_order() -> None:
    """Say :func:`onednn_off_note`'s line once (a warning of the ``gcl_tf`` logger: one line on
    stderr, as logging is configured) when TensorFlow is already imported; ``import gcl_tf``
    calls it (gcl_tf/import_hooks.py)."""
    global _noted
    if _noted or sys.modules.get("tensorflow") is None:
        return
    _noted = True
    note = onednn_off_note(os.environ, platform.machine(), onednn_enabled())
    if note:
        logging.getLogger("gcl_tf").warning(note)


def _wanted() -> bool:
    return os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip() not in ("", "0")


@contextlib.contextmanager
def startup_lines_dropped():
    """Capture stderr (the file descriptor, where TensorFlow's C++ logs go) while the block runs,
    then write it back without TensorFlow's start-up lines; nothing is captured when
    ``TF_CPP_MIN_LOG_LEVEL`` is 0 or unset, or inside another capture."""
    global _capturing
    if _capturing or not _wanted():
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to capture
        yield
        return
    _capturing = True
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            _capturing = False
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if not _NOISE.match(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def quiet_import(execute, tensorflow_module) -> None:
    """Run ``execute()`` (the import of TensorFlow) and list the devices (the CUDA probe logs
    then) with the start-up lines dropped; ``TF_CPP_MIN_LOG_LEVEL`` 2 unless it is set."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    choose_cpu_kernels()
    with startup_lines_dropped():
        execute()
        tensorflow_module.config.list_physical_devices()


def import_tensorflow():
    """Import and return ``tensorflow`` with its import-time INFO lines dropped from stderr."""
    if "tensorflow" not in sys.modules:
        choose_cpu_kernels()
        with startup_lines_dropped():
            import tensorflow

            tensorflow.config.list_physical_devices()  # device probing logs now, while captured
    import tensorflow

    return tensorflow
