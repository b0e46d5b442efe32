"""ACC, FGT, BWT (and the rest) on hand-made accuracy matrices, computed by hand."""
from __future__ import annotations

import numpy as np
import pytest

from gcl_tf import metrics

# R[i][j]: accuracy on task j after training on task i.
R = [
    [90.0, 10.0, 20.0],
    [60.0, 80.0, 30.0],
    [50.0, 70.0, 85.0],
]


def test_acc_fgt_bwt_by_hand():
    # ACC: mean of the last row.
    assert metrics.average_accuracy(R) == pytest.approx((50 + 70 + 85) / 3)
    # FGT: task 0 peaked at 90 (row 0), ends at 50 -> 40; task 1 peaked at 80 (row 1), ends at 70 -> 10.
    assert metrics.forgetting(R) == pytest.approx((40 + 10) / 2)
    # BWT: (50 - 90) and (70 - 80): the final accuracy against the one right after learning.
    assert metrics.backward_transfer(R) == pytest.approx((-40 - 10) / 2)
    # Learning accuracy: the diagonal.
    assert metrics.learning_accuracy(R) == pytest.approx((90 + 80 + 85) / 3)
    # FWT: accuracy on task j before training on it (R[j-1][j]) against a baseline b[j].
    assert metrics.forward_transfer(R, [10.0, 12.0, 25.0]) == pytest.approx(((10 - 12) + (30 - 25)) / 2)


def test_forgetting_peak_is_taken_before_the_last_task():
    # Task 0 improves after it was learned: it peaks at row 1 (75), and the last row (95) beats
    # every earlier one, so its forgetting is negative: 75 - 95.
    M = np.array([
        [60.0, 5.0, 5.0],
        [75.0, 90.0, 5.0],
        [95.0, 40.0, 70.0],
    ])
    assert metrics.forgetting(M) == pytest.approx(((75 - 95) + (90 - 40)) / 2)
    assert metrics.backward_transfer(M) == pytest.approx(((95 - 60) + (40 - 90)) / 2)
    assert metrics.average_accuracy(M) == pytest.approx((95 + 40 + 70) / 3)


def test_partial_matrix_uses_the_last_filled_row():
    M = np.full((3, 3), np.nan)
    M[0] = [80.0, 10.0, 10.0]
    M[1] = [50.0, 90.0, 10.0]
    assert metrics.average_accuracy(M) == pytest.approx((50 + 90 + 10) / 3)
    assert metrics.forgetting(M) == pytest.approx(30.0)
    assert metrics.backward_transfer(M) == pytest.approx(-30.0)
    with pytest.raises(ValueError):
        metrics.average_accuracy(np.full((2, 2), np.nan))


def test_single_task_and_summary():
    assert metrics.forgetting([[70.0]]) == 0.0 and metrics.backward_transfer([[70.0]]) == 0.0
    assert metrics.average_accuracy([[70.0]]) == 70.0
    summary = metrics.summarize(R)
    assert set(summary) == {"acc", "fgt", "bwt", "learning_accuracy"}
    assert summary["acc"] == pytest.approx(205 / 3) and summary["fgt"] == pytest.approx(25.0)
    assert summary["bwt"] == pytest.approx(-25.0)
    assert "fwt" in metrics.summarize(R, initial_accuracy=[10.0, 10.0, 10.0])
