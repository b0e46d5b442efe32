"""What a run's folder holds, and which config keys do not change a run's results.

``python -m gcl_tf.train`` (gcl_tf/train.py) writes, in its output folder ``DIR``::

    DIR/results.json      the accuracy matrix and its summaries (the run is finished once it exists)
    DIR/config.yaml       the run's whole config (what --resume compares with)
    DIR/model.json        input shape, classes and method: what gcl_tf.export needs with a checkpoint
    DIR/learner.keras     the learner saved whole (gcl_tf.load_model, init_from)
    DIR/artifacts.npz     arrays for the suite's figures (gcl_tf/artifacts.py)
    DIR/checkpoints/      tf.train checkpoints (gcl_tf/checkpoint.py): what --resume continues from
    DIR/tensorboard/      TensorBoard logs
    DIR/plots.png         the accuracy matrix as a heatmap, each task's accuracy over the stream
    DIR/gcl_tf.lock       the lock a process holds while it works in DIR (gcl_tf/faults.py)

The checkpoints, the tuner (gcl_tf/tune), the paper suite (gcl_tf/benchmark) and export read
these names from here. Nothing heavy is imported: the command lines check a folder before
TensorFlow loads.
"""
from __future__ import annotations

import glob
import os
import re

RESULTS = "results.json"
CONFIG = "config.yaml"
MODEL_INFO = "model.json"
LEARNER = "learner.keras"
ARTIFACTS = "artifacts.npz"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"
LOCK_FILE = "gcl_tf.lock"
PLOTS = "plots.png"  # the run's pictures: its accuracy matrix and each task's accuracy over the stream
# A search's folder (``python -m gcl_tf.tune``, gcl_tf/tune) holds beside its trials' run folders:
SEARCH_FILE = "search.json"  # what is searched
BEST_CONFIG = "best_config.yaml"  # the best trial's config, ready for --config
BEST_FILE = "best.json"  # every finished trial's values and validation ACC, best first
# What a run's or a search's folder holds beside the config.yaml / best_config.yaml it saved
# (config.saved_by_gcl_tf: a saved config reads as that run ran).
SAVED_BESIDE_CONFIG = (MODEL_INFO, RESULTS, CHECKPOINTS, LEARNER, BEST_FILE, SEARCH_FILE)

# What a run's folder may hold, all written by gcl_tf.train (what its --overwrite replaces; its
# config.yaml marks it: gcl_tf/overwrite.py); and a search's (gcl_tf.tune: KerasTuner's state, its
# trials' runs, the hyper-parameters' TensorBoard events; its search.json marks it).
RUN_NAMES = (RESULTS, CONFIG, MODEL_INFO, LEARNER, ARTIFACTS, CHECKPOINTS, TENSORBOARD, PLOTS)
SEARCH_NAMES = (SEARCH_FILE, BEST_FILE, BEST_CONFIG, "oracle.json", "tuner*.json", "trial_*", "best",
                "events.out.tfevents.*")

# Config keys (dotted; a section name covers the section) that do not change a run's results:
# a run may be resumed, and a suite's or a search's finished run reused, with other values.
RESULT_NEUTRAL_KEYS = ("output_dir", "train.verbose", "train.log_every", "train.checkpoint_every", "tune")


def checkpoint_dir(output_dir: str) -> str:
    """``DIR/checkpoints``, absolute: a relative ``--output`` (``runs/qs``) must name the same folder
    in every call, and TensorFlow's index joins the folder to the relative names it stores."""
    return os.path.abspath(os.path.join(output_dir, CHECKPOINTS))


def checkpoint_steps(output_dir: str) -> list[int]:
    """The global steps of the checkpoints in ``DIR/checkpoints`` (from their file names, without
    TensorFlow), in increasing order."""
    names = glob.glob(os.path.join(glob.escape(checkpoint_dir(output_dir)), "ckpt-*.index"))
    return sorted(int(m.group(1)) for m in (re.search(r"ckpt-(\d+)\.index$", n) for n in names) if m)


def unfinished_run(output_dir: str) -> str | None:
    """What an unfinished run left in ``output_dir`` that a fresh run would delete (its checkpoints,
    or a learner written without its results), said in a few words; None when there is none."""
    if os.path.exists(os.path.join(output_dir, RESULTS)):
        return None  # a finished run: its own message
    steps = checkpoint_steps(output_dir)
    if steps:
        return f"an unfinished run (its checkpoint of step {steps[-1]} in {checkpoint_dir(output_dir)})"
    for name in (LEARNER, ARTIFACTS):
        if os.path.exists(os.path.join(output_dir, name)):
            return f"an unfinished run (its {name}, without {RESULTS})"
    return None
