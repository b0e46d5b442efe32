"""Whether a planned run of ``python -m gcl_tf.benchmark paper`` is done (``run``: a
:class:`gcl_tf.benchmark.paper.Run`): :func:`finished` (its folder holds its results, of the same
config), :func:`resumable` (its checkpoints, of the same config) and, for ``--dry-run`` before
TensorFlow loads, :func:`finished_as_stated` (the method's keys as far as the config states them)."""
from __future__ import annotations

import json
import os

from gcl_tf.errors import NotResumable, UserError
from gcl_tf.io import read_json
from gcl_tf.run_layout import RESULT_NEUTRAL_KEYS, RESULTS, unfinished_run


def _saved_config(folder: str):
    """The config of the finished run in ``folder`` (its results.json's), or None when there is none."""
    path = os.path.join(folder, RESULTS)
    if not os.path.isfile(path):
        return None
    try:
        return read_json(path).get("config", {})
    except (OSError, ValueError):
        raise UserError(f"{path}: not a readable results file; remove it to recompute the run") from None


def _same(folder: str, saved: dict, planned: dict, neutral=RESULT_NEUTRAL_KEYS) -> bool:
    from gcl_tf import config as config_lib

    shown = config_lib.describe_differences(_plain(saved), _plain(planned), neutral)
    if shown:
        raise UserError(f"{folder} holds a finished run with another config ({shown}); "
                        "choose another --output or remove that folder")
    return True


def finished(run, folder: str) -> bool:
    """True when ``folder`` holds this run's results; a different finished config is an error."""
    from gcl_tf import config as config_lib
    from gcl_tf.data.fingerprint import KEY, moved_data

    saved = _saved_config(folder)
    if saved is None:
        return False
    recorded = read_json(os.path.join(folder, RESULTS)).get(KEY)  # its data by content: the path may differ
    neutral = RESULT_NEUTRAL_KEYS + moved_data(saved, run.config, recorded)
    return _same(folder, config_lib.saved_as_today(saved), run.config.to_dict(), neutral)  # a key added since: default


def finished_as_stated(run, folder: str) -> bool:
    """:func:`finished` for a run planned before TensorFlow loads (``run.stated``: the method keys
    its config states): the run's sections compared as :func:`finished` does, the method's keys
    those the config states that the saved run has (each read as the saved value's type: 1 as
    1.0); the others are compared when the suite runs."""
    from gcl_tf import config as config_lib

    saved = _saved_config(folder)
    if saved is None:
        return False
    try:
        today = config_lib.resolve(saved).to_dict()  # a key added since: its default
    except UserError:
        today = dict(saved)
    method = saved.get("method") if isinstance(saved.get("method"), dict) else {}
    keys = [key for key in ("name", *run.stated) if key in method]
    today["method"] = {key: method[key] for key in keys}
    planned = run.config.to_dict()
    stated = {"name": run.config.method.name, **run.stated}
    planned["method"] = {key: _like(stated.get(key), method[key]) for key in keys}
    from gcl_tf.data.fingerprint import KEY, moved_data

    recorded = read_json(os.path.join(folder, RESULTS)).get(KEY)
    return _same(folder, today, planned, RESULT_NEUTRAL_KEYS + moved_data(saved, run.config, recorded))


def _like(value, saved):
    """A stated value read as the type of the saved one (YAML's 1 or '1e-3' for a float key)."""
    if isinstance(saved, float) and not isinstance(value, bool):
        try:
            return float(value)
        except (TypeError, ValueError):
            return value
    return value


def resumable(run, folder: str) -> bool:
    """True when ``folder`` holds this run's unfinished run (a stopped suite: it goes on from its
    checkpoint); one line when it holds an unfinished run that the planned config cannot resume."""
    left = unfinished_run(folder)
    if left is None:
        return False
    from gcl_tf.train import check_resumable

    try:
        check_resumable(folder, run.config)
    except NotResumable as error:
        raise UserError(f"{folder} holds {left}, which does not resume: {error.reason}; "
                        "choose another --output or remove that folder") from None
    return True


def _plain(data):
    """A config dictionary as JSON has it (tuples as lists)."""
    return json.loads(json.dumps(data))
