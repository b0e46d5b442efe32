"""Continual-learning metrics on the accuracy matrix.

``R[i][j]`` is the accuracy (percent) on task ``j`` after training on task ``i``; rows are filled
as training goes, so a partial matrix has NaN in rows not reached yet.
"""
from __future__ import annotations

import numpy as np


def _last_row(R: np.ndarray) -> int:
    filled = np.flatnonzero(~np.isnan(R).all(axis=1))
    if len(filled) == 0:
        raise ValueError("the accuracy matrix has no filled row")
    return int(filled[-1])


def average_accuracy(R) -> float:
    """ACC: mean accuracy over all tasks after the last task trained."""
    R = np.asarray(R, dtype=float)
    return float(np.mean(R[_last_row(R)]))


def forgetting(R) -> float:
    """FGT (Chaudhry et al. 2018): mean over tasks j < T of max_{l < T} R[l][j] - R[T][j].

    T is the last task trained; the peak is taken over the rows before it. 0 with one task.
    """
    R = np.asarray(R, dtype=float)
    last = _last_row(R)
    if last == 0:
        return 0.0
    peaks = np.max(R[:last, :last], axis=0)
    return float(np.mean(peaks - R[last, :last]))


def backward_transfer(R) -> float:
    """BWT (Lopez-Paz & Ranzato 2017): mean over j < T of R[T][j] - R[j][j]."""
    R = np.asarray(R, dtype=float)
    last = _last_row(R)
    if last == 0:
        return 0.0
    return float(np.mean(R[last, :last] - np.diag(R)[:last]))


def forward_transfer(R, baseline) -> float:
    """FWT (Lopez-Paz & Ranzato 2017): mean over j > 0 of R[j-1][j] - b[j], b the accuracy at init."""
    R = np.asarray(R, dtype=float)
    last = _last_row(R)
    if last == 0:
        return 0.0
    b = np.asarray(baseline, dtype=float)
    return float(np.mean([R[j - 1, j] - b[j] for j in range(1, last + 1)]))


def learning_accuracy(R) -> float:
    """Mean accuracy on each task right after training on it (the diagonal)."""
    R = np.asarray(R, dtype=float)
    last = _last_row(R)
    return float(np.mean(np.diag(R)[: last + 1]))


def summarize(R, initial_accuracy=None) -> dict:
    out = {
        "acc": average_accuracy(R),
        "fgt": forgetting(R),
        "bwt": backward_transfer(R),
        "learning_accuracy": learning_accuracy(R),
    }
    if initial_accuracy is not None:
        out["fwt"] = forward_transfer(R, initial_accuracy)
    return out
