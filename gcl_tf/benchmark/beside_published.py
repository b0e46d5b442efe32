"""The suite's tables that set our runs beside published numbers other than the paper's Tables 1
and 2: the paper's memory-size figures and its CN-DPM table (``--studies memory``), and today's
online protocol beside its published re-runs (``configs/split_cifar10_ocl.yaml``).

Differences between two methods are paired by seed: the mean of the per-seed differences ± its
standard error over the seeds both ran (``layout.paired_difference``); a published difference is a
difference of published means.
"""
from __future__ import annotations

import re
from collections import defaultdict

from gcl_tf.benchmark import layout, published, roles
from gcl_tf.benchmark.cells import csv_text, fmt, fmt_change, markdown, num
from gcl_tf.benchmark.layout import benchmark_label, mean_std, method_label, method_sort_key, paired_difference


def _by_seed(runs, key: str) -> dict:
    return {r.seed: r.results.get(key) for r in runs}


def lead(base: list, other: list, key: str = "acc") -> tuple[float, float, int]:
    """``other − base`` in ``key``, paired by seed: (mean, standard error, pairs)."""
    a, b = _by_seed(base, key), _by_seed(other, key)
    return paired_difference([(a[s], b[s]) for s in sorted(set(a) & set(b))])


# ----------------------------------------------------------------------------- the memory study
def memory_vs_paper_table(memory_runs: dict) -> tuple[str, str]:
    """The memory study's two methods (the paper's ER and GCL, roles.MEMORY_METHODS) by memory size
    beside the paper's memory figures, and the second's lead over the first by size (ours paired
    by seed, the paper's difference of means). ``memory_runs``: study_tables.memory_runs."""
    base, top = roles.MEMORY_METHODS
    md_rows, csv_rows = [], []
    for b, groups in sorted(memory_runs.items()):
        if b not in published.PAPER_MEMORY:
            continue
        for size in sorted({size for (_, size) in groups}):
            below, above = groups.get((base, size), []), groups.get((top, size), [])
            ours = {(m, k): mean_std(r.results[k] for r in group) for m, group in ((base, below), (top, above))
                    for k in ("acc", "fgt")}
            paper = {(m, k): published.paper_memory(b, m, size, k) for m in (base, top) for k in ("acc", "fgt")}
            diff = lead(below, above) if below and above else (float("nan"), float("nan"), 0)
            paper_diff = (None if paper[base, "acc"] is None or paper[top, "acc"] is None
                          else round(paper[top, "acc"][0] - paper[base, "acc"][0], 2))

            def cells(m, k):
                return [fmt(*ours[m, k], show_n=True) if ours[m, k][2] else "-",
                        "-" if paper[m, k] is None else fmt(*paper[m, k], published.PAPER_SEEDS)]

            md_rows.append([benchmark_label(b), str(size), *cells(base, "acc"), *cells(top, "acc"),
                            fmt_change(*diff) if diff[2] else "-",
                            "-" if paper_diff is None else f"{paper_diff:+.2f}", *cells(base, "fgt"),
                            *cells(top, "fgt")])
            csv_rows.append([b, size, *[num(v) for m in (base, top) for k in ("acc", "fgt")
                                        for v in (*ours[m, k], *(paper[m, k] or (None, None)))],
                             num(diff[0]), num(diff[1]), diff[2] or "", num(paper_diff)])
    if not md_rows:
        return "", ""
    low, high = method_label(base), method_label(top)
    header = ["Benchmark", "Memory", f"{low} ACC ours", f"{low} ACC paper", f"{high} ACC ours", f"{high} ACC paper",
              f"{high} − {low} ours (by seed)", f"{high} − {low} paper", f"{low} FGT ours", f"{low} FGT paper",
              f"{high} FGT ours", f"{high} FGT paper"]
    caption = ("**Memory size, ours beside the paper's figures** (test %, mean ± sample std (n); the paper's "
               f"over {published.PAPER_SEEDS} seeds). {high} − {low}: ours as the mean of the per-seed differences ± "
               "its standard error, the paper's as the difference of its means.\n\n")
    csv_header = ["benchmark", "memory_size"] + [f"{m}_{k}_{s}" for m in (base, top) for k in ("acc", "fgt")
                                                   for s in ("mean", "std", "seeds", "paper_mean", "paper_std")]
    csv_header += [f"{top}_minus_{base}_mean", f"{top}_minus_{base}_se", f"{top}_minus_{base}_seeds",
                   f"paper_{top}_minus_{base}"]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


def cndpm_table(memory_runs: dict) -> tuple[str, str]:
    """The paper's appendix table on Split CIFAR10 (ER, CN-DPM, GCL at memory 500 and 1000: the
    memory study's two methods around CN-DPM), ours beside it; CN-DPM as the paper quotes it (no
    run of ours)."""
    groups = memory_runs.get("split_cifar10")
    if not groups:
        return "", ""
    sizes = sorted(published.PAPER_CNDPM)
    header = ["Method"] + [f"{s} {w}" for s in sizes for w in ("ours", "paper")]
    md_rows, csv_rows = [], []
    base, top = roles.MEMORY_METHODS
    for m in (base, "cndpm", top):
        row, csv_row = ["CN-DPM (quoted)" if m == "cndpm" else method_label(m)], [m]
        for s in sizes:
            if m == "cndpm":
                ours, paper = (float("nan"), float("nan"), 0), published.PAPER_CNDPM[s]
            else:
                ours, paper = mean_std(r.results["acc"] for r in groups.get((m, s), [])), \
                    published.paper_memory("split_cifar10", m, s, "acc")
            row += [fmt(*ours, show_n=True) if ours[2] else "-", "-" if paper is None else fmt(*paper, 5)]
            csv_row += [num(ours[0]), num(ours[1]), ours[2] or "", *[num(v) for v in (paper or (None, None))]]
        md_rows.append(row)
        csv_rows.append(csv_row)
    caption = (f"**{method_label(top)} and CN-DPM by memory size on Split CIFAR10** (the paper's appendix table; "
               "test ACC %, "
               "mean ± std (n)). CN-DPM (Lee et al. 2020) is quoted as the paper quotes it; we do not run it.\n\n")
    csv_header = ["method"] + [f"m{s}_{c}" for s in sizes for c in ("mean", "std", "seeds", "paper_mean",
                                                                      "paper_std")]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


# ----------------------------------------------------------------------------- today's protocol
_TRUNK_OR_MEMORY = re.compile(rf"(?:(?:{'|'.join(map(re.escape, layout.BACKBONES))})(?:_\d+)?|memory\d+)")


def setting_of(run) -> str:
    """What a run's folder changes besides its trunk and memory size (which the table's columns
    show): ``""`` for the preset (``onpro``, ``er-convnet``, ``er-resnet18_64``, ``er-memory200``),
    else the folder's suffix without them (``onpro-rotations4``: ``rotations4``, a stated deviation;
    ``gcl-paper-memory200``: ``paper``)."""
    parts = run.variant.split("-")[1:]  # gcl-paper-memory200: paper (its memory size is a column)
    return "-".join(p for p in parts if not _TRUNK_OR_MEMORY.fullmatch(p))


def today_table(runs) -> tuple[str, str]:
    """Every run of a benchmark of today's protocol (published.PUBLISHED_TODAY) by method, trunk,
    memory size and setting (:func:`setting_of`: a variant run by hand, its own row): ours beside
    the published re-runs, and each of roles.TODAY_LEADS (GCL, OnPro) − method paired by seed (that
    method's preset, on its preset's trunk, at the row's memory size)."""
    groups = defaultdict(list)
    for run in runs:
        if run.benchmark in published.PUBLISHED_TODAY:
            model = run.config.get("model", {})
            trunk = f"{model.get('backbone')} {model.get('filters')}"
            groups[(run.benchmark, run.memory_size, run.method, trunk, setting_of(run))].append(run)
    md_rows, csv_rows = [], []

    def reference(b, size, method):
        found = [key for key in groups if key[:3] == (b, size, method) and not key[4]]
        return groups[min(found, key=lambda k: not _preset_trunk(groups[k]))] if found else []

    for key in sorted(groups, key=lambda k: (k[0], k[1] or 0, method_sort_key(k[2]), k[3], k[4])):
        b, size, method, trunk, setting = key
        group = groups[key]
        acc, fgt = (mean_std(r.results[k] for r in group) for k in ("acc", "fgt"))
        learned = mean_std(r.results.get("learning_accuracy") for r in group)
        pub = None if setting else published.published_today(b, method, size)
        leads = [lead(group, ref) if ref and ref is not group else (float("nan"), float("nan"), 0)
                 for ref in (reference(b, size, m) for m in roles.TODAY_LEADS)]
        shown_pub = "-" if pub is None else (f"{pub[0]:.1f}" if pub[0] == pub[1] else f"{pub[0]:.1f}–{pub[1]:.1f}")
        label = method_label(method) + (f" ({setting})" if setting else "")
        md_rows.append([benchmark_label(b), str(size), label, trunk, fmt(*acc, show_n=True),
                        fmt(*fgt), fmt(*learned), shown_pub, *[fmt_change(*d) if d[2] else "-" for d in leads]])
        csv_rows.append([b, size, method, trunk, setting, acc[2], num(acc[0]), num(acc[1]), num(fgt[0]), num(fgt[1]),
                         num(learned[0]), num(learned[1]), *(num(v) for v in (pub[:2] if pub else (None, None))),
                         *(num(v) for d in leads for v in d[:2])])
    if not md_rows:
        return "", ""
    names = [method_label(m) for m in roles.TODAY_LEADS]
    header = ["Benchmark", "Memory", "Method", "Trunk", "ACC ours", "FGT ours", "LA ours", "ACC published",
              *[f"{name} − method (by seed)" for name in names]]
    caption = ("**Today's online protocol** (test %, mean ± sample std (n)): every method with the same in-step "
               "augmentation (crop, flip, colour jitter, grayscale) and a replay batch of 64. LA: learning accuracy, "
               "each task's accuracy just after learning it, averaged over the tasks (a method that learns its "
               "tasks less well has less to forget: read FGT beside it). Published: at the row's memory size, "
               "PDFK's re-runs (AAAI 2026, Table 1) for the baselines, OnPro's authors' (ICCV 2023, Table 1; "
               "their own augmentation) for OnPro; their trunk: ResNet-18 with 64 filters, ours 20. "
               f"{' and '.join(f'{name} − method' for name in names)}: the mean of the per-seed "
               f"differences ± its standard error, against {names[0]} ({', '.join(names[1:])}) on its preset's "
               "trunk at the row's memory size. A method with a setting in brackets is a variant of its "
               "preset run by hand (its folder's name), not the method as published.\n\n")
    csv_header = ["benchmark", "memory_size", "method", "trunk", "setting", "seeds", "acc_mean", "acc_std", "fgt_mean",
                  "fgt_std", "learning_accuracy_mean", "learning_accuracy_std", "published_low", "published_high",
                  *[f"{m}_minus_{s}" for m in roles.TODAY_LEADS for s in ("mean", "se")]]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


def _preset_trunk(group) -> bool:
    """Whether ``group`` (runs of one method and trunk) are the method's main runs (its preset's trunk)."""
    return any(r.is_main or r.variant == layout.memory_variant(r.method, r.memory_size) for r in group)
