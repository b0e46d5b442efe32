"""TFDS's data_dir, as the ``tfds`` source (gcl_tf/data/sources.py) meets it: where it is
(:func:`data_dir`), whether a dataset is prepared there (:func:`prepared`, read without TFDS or
TensorFlow), and a download that fails (:func:`download_guard`):

- **in seconds without a network.** TFDS's downloader retries a failed connection ten times with
  a doubling pause (about 3.5 minutes when a name does not resolve). Before TFDS opens each URL,
  one connection to its host (or to the proxy the environment names for it) says whether the
  network is there; without it, TFDS's download fails at once with a ``ConnectionError``, as its
  last retry would. TFDS's builder runs as usual up to that point, and with a network the
  download is TFDS's own, retries included.
- **leaving nothing behind.** A failed download leaves TFDS's temporary files
  (``downloads/<name>/*.tmp.*``) and the folders it made (an empty ``<name>/``, which would read
  as prepared); those this download made are removed. Nothing that was there before is touched.
- **without progress bars in a log.** TFDS's progress bars are kept on a terminal and left out
  when stderr is not one (a log file), as Keras's are (gcl_tf/train.py); its warning that a
  dataset not downloaded yet has no dataset_info.json, logged before every first download, too.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import socket
import sys
import urllib.parse
import urllib.request

CONNECT_SECONDS = 10.0  # the probe's wait for a host that does not answer (a dropped connection)
_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21}


def data_dir(path=None) -> str:
    """TFDS's data_dir for ``benchmark.path`` (None: ``TFDS_DATA_DIR`` or ~/tensorflow_datasets,
    as TFDS chooses it)."""
    return path or os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")


def prepared(folder: str, name: str) -> bool:
    """Whether TFDS has prepared dataset ``name`` in ``folder``: a version of it (of any of its
    configs) holds the ``dataset_info.json`` TFDS writes last. An empty or half-written
    ``folder/name`` is not prepared."""
    root = glob.escape(os.path.join(folder, name))
    return bool(glob.glob(os.path.join(root, "*", "dataset_info.json"))
                or glob.glob(os.path.join(root, "*", "*", "dataset_info.json")))


def check_reachable(url: str, timeout: float = CONNECT_SECONDS) -> None:
    """A ``ConnectionError`` (from the socket's error) unless a connection to ``url``'s host (or
    the proxy the environment names for it) opens within ``timeout`` seconds."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme)
    if not host or port is None:
        return  # not a network URL (a file TFDS copies): nothing to probe
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        target = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = target.hostname or host, target.port or _DEFAULT_PORTS.get(target.scheme, port)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(f"cannot reach {host}:{port} ({error.strerror or error})") from error


@contextlib.contextmanager
def _probe_before_download():
    """TFDS's downloader opens every URL through its ``_open_url``: :func:`check_reachable`
    first (nothing changes when this TFDS has no such function). Installed once for the process
    and never taken back: TFDS downloads a dataset's URLs in a pool of threads, some of which may
    open theirs after the first failure ended the block (a restored function would let them
    retry against no network, ten times each, and write temporary files after the cleanup)."""
    try:
        from tensorflow_datasets.core.download import downloader
    except ImportError:
        yield
        return
    original = getattr(downloader, "_open_url", None)
    if original is not None and not getattr(original, "gcl_tf_probe", False):

        def probed(url, **kwargs):
            check_reachable(url)
            return original(url, **kwargs)

        probed.gcl_tf_probe = True
        downloader._open_url = probed
    yield


@contextlib.contextmanager
def _bars_off_outside_a_terminal():
    try:
        from tensorflow_datasets.core.utils import tqdm_utils
    except ImportError:
        yield
        return
    before = getattr(tqdm_utils, "_active", True)
    if not sys.stderr.isatty():
        tqdm_utils.display_progress_bar(False)
    try:
        yield
    finally:
        tqdm_utils.display_progress_bar(before)


@contextlib.contextmanager
def _nothing_left_on_failure(folder: str, name: str):
    """On an exception, remove what TFDS made in ``folder`` for ``name`` during the block: its
    temporary entries (``*.tmp.*``, ``incomplete.*``) and the folders left empty."""
    downloads = os.path.join(folder, "downloads")
    folders = [folder, os.path.join(folder, name), downloads, os.path.join(downloads, name),
               os.path.join(downloads, "extracted")]
    existed = {f: set(os.listdir(f)) for f in folders if os.path.isdir(f)}
    try:
        yield
    except BaseException:
        for parent in folders[1:]:
            for entry in os.listdir(parent) if os.path.isdir(parent) else ():
                if entry not in existed.get(parent, ()) and (".tmp." in entry or entry.startswith("incomplete.")):
                    path = os.path.join(parent, entry)
                    with contextlib.suppress(OSError):
                        if os.path.isdir(path):
                            shutil.rmtree(path)
                        else:
                            os.unlink(path)
        for made in reversed(folders):  # the deepest first
            if made not in existed and os.path.isdir(made) and not os.listdir(made):
                with contextlib.suppress(OSError):
                    os.rmdir(made)
        raise


class _NotYetPrepared(logging.Filter):
    """TFDS's warning that a dataset's version folder has no dataset_info.json when that folder
    does not exist yet: it asks whether a dataset not downloaded yet is prepared, before every
    first download. (About a folder that is there, the warning stays.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (str(record.msg).startswith("Variant folder %s has no") and args
                    and not os.path.isdir(os.fspath(args[0])))


@contextlib.contextmanager
def download_guard(folder: str, name: str):
    """Around ``tfds.load(name, data_dir=folder, download=True)``: see the module's docstring."""
    quiet, absl = _NotYetPrepared(), logging.getLogger("absl")
    absl.addFilter(quiet)
    try:
        with _nothing_left_on_failure(folder, name), _probe_before_download(), _bars_off_outside_a_terminal():
            yield
    finally:
        absl.removeFilter(quiet)
