"""The paper's published numbers (Tang & Matteson, ICLR 2021), for the suite's tables beside ours.

Tables 1 and 2: test ACC and FGT (%), mean and standard deviation over the paper's five seeds, by
benchmark (the stem of ``configs/<benchmark>.yaml``) and method (the registry's name). A method the
paper did not run on a benchmark (its ``-`` cells) is absent.

Data about the papers, not code: the numbers are keyed by the registry's names of the methods they
are numbers of (the one module of gcl_tf/benchmark that names methods besides paper_suite.yaml).
"""
from __future__ import annotations

#: The paper's seed count for Tables 1 and 2 ("computed over five runs using different random seeds").
PAPER_SEEDS = 5

#: {benchmark: {method: {"acc": (mean, std), "fgt": (mean, std)}}}
PAPER_RESULTS: dict[str, dict[str, dict[str, tuple[float, float]]]] = {
    # Table 1
    "permuted_mnist": {
        "finetune": {"acc": (60.19, 2.31), "fgt": (23.62, 1.98)},
        "ewc": {"acc": (64.94, 1.22), "fgt": (18.33, 1.07)},
        "gem": {"acc": (79.17, 0.70), "fgt": (3.68, 0.68)},
        "er": {"acc": (79.90, 0.46), "fgt": (3.78, 0.45)},
        "mer": {"acc": (79.68, 0.42), "fgt": (3.47, 0.41)},
        "gcl": {"acc": (82.36, 0.36), "fgt": (2.92, 0.23)},
    },
    "rotated_mnist": {
        "finetune": {"acc": (43.80, 1.64), "fgt": (46.52, 1.71)},
        "ewc": {"acc": (44.99, 1.73), "fgt": (44.98, 1.95)},
        "gem": {"acc": (82.60, 0.48), "fgt": (5.47, 0.45)},
        "er": {"acc": (80.82, 0.68), "fgt": (6.78, 0.69)},
        "mer": {"acc": (83.56, 0.23), "fgt": (8.14, 0.46)},
        "gcl": {"acc": (86.37, 0.32), "fgt": (3.22, 0.50)},
    },
    "split_svhn": {
        "finetune": {"acc": (18.85, 0.10), "fgt": (94.78, 1.24)},
        "ewc": {"acc": (18.76, 0.27), "fgt": (94.99, 1.23)},
        "gem": {"acc": (33.40, 3.27), "fgt": (68.91, 4.06)},
        "er": {"acc": (45.41, 3.03), "fgt": (62.37, 4.33)},
        "gcl": {"acc": (60.68, 1.67), "fgt": (21.86, 2.35)},
    },
    # Table 2
    "split_cifar10": {
        "finetune": {"acc": (18.46, 0.12), "fgt": (86.48, 1.02)},
        "ewc": {"acc": (18.49, 0.13), "fgt": (86.95, 1.15)},
        "gem": {"acc": (22.88, 3.41), "fgt": (76.90, 5.53)},
        "er": {"acc": (29.94, 3.08), "fgt": (72.64, 4.88)},
        "gcl": {"acc": (49.62, 1.85), "fgt": (35.69, 3.33)},
    },
    "split_cifar100": {
        "finetune": {"acc": (55.39, 1.94), "fgt": (25.94, 1.89)},
        "ewc": {"acc": (55.60, 1.11), "fgt": (23.53, 1.19)},
        "icarl": {"acc": (58.08, 1.44), "fgt": (24.22, 1.35)},
        "gem": {"acc": (65.66, 0.70), "fgt": (15.52, 0.41)},
        "er": {"acc": (69.40, 1.21), "fgt": (11.25, 1.24)},
        "gcl": {"acc": (74.51, 0.99), "fgt": (6.54, 1.26)},
    },
    "split_miniimagenet": {
        "finetune": {"acc": (37.84, 0.87), "fgt": (31.41, 1.57)},
        "ewc": {"acc": (36.61, 2.06), "fgt": (28.17, 4.49)},
        "gem": {"acc": (54.06, 0.22), "fgt": (13.17, 0.74)},
        "er": {"acc": (58.74, 0.74), "fgt": (9.02, 2.49)},
        "gcl": {"acc": (61.54, 0.57), "fgt": (6.10, 2.73)},
    },
}


def paper_result(benchmark: str, method: str, key: str) -> tuple[float, float] | None:
    """The paper's (mean, std) of ``key`` ("acc" or "fgt") for a method on a benchmark, or None."""
    return PAPER_RESULTS.get(benchmark, {}).get(method, {}).get(key)


def paper_lead(benchmark: str, method: str, lead: str) -> float | None:
    """``lead``'s ACC lead over ``method`` in the paper (difference of the two published means;
    the suite's lead is the paper's method, roles.LEAD), or None."""
    ahead, other = paper_result(benchmark, lead, "acc"), paper_result(benchmark, method, "acc")
    return None if ahead is None or other is None else round(ahead[0] - other[0], 2)


#: The paper's memory-size figures (appendix, "Average accuracy / forgetting as a function of
#: memory size"; the 250 bars are Table 2's runs): {benchmark: {method: {memory_size: {"acc": (mean,
#: std), "fgt": (mean, std)}}}}, five seeds each.
PAPER_MEMORY: dict[str, dict[str, dict[int, dict[str, tuple[float, float]]]]] = {
    "split_svhn": {
        "er": {100: {"acc": (31.12, 2.21), "fgt": (79.76, 2.80)}, 250: {"acc": (45.51, 3.03), "fgt": (62.37, 4.33)},
               500: {"acc": (57.51, 2.77), "fgt": (46.79, 4.32)}, 1000: {"acc": (67.33, 1.66), "fgt": (33.88, 1.39)}},
        "gcl": {100: {"acc": (45.79, 5.92), "fgt": (25.49, 5.84)}, 250: {"acc": (60.68, 1.67), "fgt": (21.68, 2.35)},
                500: {"acc": (65.79, 1.54), "fgt": (16.65, 1.08)}, 1000: {"acc": (69.95, 0.78), "fgt": (15.37, 1.22)}},
    },
    "split_cifar10": {
        "er": {100: {"acc": (21.54, 0.83), "fgt": (84.59, 1.38)}, 250: {"acc": (29.94, 3.08), "fgt": (72.64, 4.88)},
               500: {"acc": (36.08, 1.09), "fgt": (64.58, 1.30)}, 1000: {"acc": (45.75, 1.82), "fgt": (52.15, 2.56)}},
        "gcl": {100: {"acc": (40.01, 2.33), "fgt": (42.30, 3.79)}, 250: {"acc": (49.62, 1.85), "fgt": (35.69, 3.33)},
                500: {"acc": (53.87, 0.97), "fgt": (31.18, 1.55)}, 1000: {"acc": (57.26, 0.28), "fgt": (28.53, 0.68)}},
    },
}

#: CN-DPM (Lee et al. 2020) as the paper's appendix table "GCL results and CN-DPM results with
#: different memory sizes" quotes it on Split CIFAR10 (ACC %, mean and std; no FGT given):
#: {memory_size: (mean, std)}. The table's ER and GCL cells are PAPER_MEMORY's.
PAPER_CNDPM: dict[int, tuple[float, float]] = {500: (43.07, 0.16), 1000: (45.21, 0.18)}


def paper_memory(benchmark: str, method: str, memory_size: int, key: str) -> tuple[float, float] | None:
    """The paper's (mean, std) of ``key`` ("acc" or "fgt") at a memory size, or None."""
    return PAPER_MEMORY.get(benchmark, {}).get(method, {}).get(int(memory_size), {}).get(key)


#: Published re-runs under today's online protocol on Split CIFAR-10 (5 tasks, batch 10, one pass;
#: every method with the same augmentation and a replay batch of 64, our ``split_cifar10_ocl``), ACC %
#: at the end of the stream, one number per memory size with its source: {method: {memory_size:
#: (low, high, source)}} (low == high: the structure keeps a range possible, none is used). The
#: baselines' are PDFK's re-runs (AAAI 2026, Table 1; the colour-jitter set for every method); OnPro's
#: its authors' (ICCV 2023, Table 1: 16 rotations, their own augmentation, without colour jitter).
#: Their trunk: the reduced ResNet-18 with 64 filters (ours: 20).
_PDFK = "PDFK (AAAI 2026) Table 1"
PUBLISHED_TODAY: dict[str, dict[str, dict[int, tuple[float, float, str]]]] = {
    "split_cifar10_ocl": {
        "er": {200: (45.72, 45.72, _PDFK), 500: (52.08, 52.08, _PDFK), 1000: (65.59, 65.59, _PDFK)},
        "er_ace": {200: (48.41, 48.41, _PDFK), 500: (55.97, 55.97, _PDFK), 1000: (63.21, 63.21, _PDFK)},
        "derpp": {200: (49.53, 49.53, _PDFK), 500: (55.64, 55.64, _PDFK), 1000: (59.68, 59.68, _PDFK)},
        "onpro": {200: (65.5, 65.5, "OnPro (ICCV 2023) Table 1, its own augmentation"),
                  500: (72.6, 72.6, "OnPro (ICCV 2023) Table 1, its own augmentation")},
    },
}


def published_today(benchmark: str, method: str, memory_size) -> tuple[float, float, str] | None:
    """A published (low, high, source) ACC under today's protocol, or None."""
    if memory_size is None:
        return None
    return PUBLISHED_TODAY.get(benchmark, {}).get(method, {}).get(int(memory_size))
