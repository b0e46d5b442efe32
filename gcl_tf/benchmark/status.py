"""Whether a planned run of ``python -m gcl_tf.benchmark paper`` is done (``run``: a
:class:`gcl_tf.benchmark.paper.Run`): :func:`finished` (its folder holds its results, of the same
config) and :func:`resumable` (its checkpoints, of the same config); neither loads TensorFlow, so
``--dry-run`` answers with them."""
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
