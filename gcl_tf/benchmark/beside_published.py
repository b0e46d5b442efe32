"""The suite's tables that set our runs beside published numbers other than the paper's Tables 1
and 2: the paper's memory-size figures and its CN-DPM table (``--studies memory``), and today's
online protocol beside its published re-runs (``configs/split_cifar10_ocl.yaml``).

Differences between two methods are paired by seed: the mean of the per-seed differences ± its
standard error over the seeds both ran (``layout.paired_difference``); a published difference is a
difference of published means.
"""
from __future__ import annotations

from collections import defaultdict

from gcl_tf.benchmark import layout, published
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
    """ER and GCL by memory size beside the paper's memory figures, and GCL − ER by size (ours
    paired by seed, the paper's difference of means). ``memory_runs``: study_tables.memory_runs."""
    header = ["Benchmark", "Memory", "ER ACC ours", "ER ACC paper", "GCL ACC ours", "GCL ACC paper",
              "GCL − ER ours (by seed)", "GCL − ER paper", "ER FGT ours", "ER FGT paper", "GCL FGT ours",
              "GCL FGT paper"]
    md_rows, csv_rows = [], []
    for b, groups in sorted(memory_runs.items()):
        if b not in published.PAPER_MEMORY:
            continue
        for size in sorted({size for (_, size) in groups}):
            er, gcl = groups.get(("er", size), []), groups.get(("gcl", size), [])
            ours = {(m, k): mean_std(r.results[k] for r in group) for m, group in (("er", er), ("gcl", gcl))
                    for k in ("acc", "fgt")}
            paper = {(m, k): published.paper_memory(b, m, size, k) for m in ("er", "gcl") for k in ("acc", "fgt")}
            diff = lead(er, gcl) if er and gcl else (float("nan"), float("nan"), 0)
            paper_diff = (None if paper["er", "acc"] is None or paper["gcl", "acc"] is None
                          else round(paper["gcl", "acc"][0] - paper["er", "acc"][0], 2))

            def cells(m, k):
                return [fmt(*ours[m, k], show_n=True) if ours[m, k][2] else "-",
                        "-" if paper[m, k] is None else fmt(*paper[m, k], published.PAPER_SEEDS)]

            md_rows.append([benchmark_label(b), str(size), *cells("er", "acc"), *cells("gcl", "acc"),
                            fmt_change(*diff) if diff[2] else "-",
                            "-" if paper_diff is None else f"{paper_diff:+.2f}", *cells("er", "fgt"),
                            *cells("gcl", "fgt")])
            csv_rows.append([b, size, *[num(v) for m in ("er", "gcl") for k in ("acc", "fgt")
                                        for v in (*ours[m, k], *(paper[m, k] or (None, None)))],
                             num(diff[0]), num(diff[1]), diff[2] or "", num(paper_diff)])
    if not md_rows:
        return "", ""
    caption = ("**Memory size, ours beside the paper's figures** (test %, mean ± sample std (n); the paper's "
               f"over {published.PAPER_SEEDS} seeds). GCL − ER: ours as the mean of the per-seed differences ± "
               "its standard error, the paper's as the difference of its means.\n\n")
    csv_header = ["benchmark", "memory_size"] + [f"{m}_{k}_{s}" for m in ("er", "gcl") for k in ("acc", "fgt")
                                                   for s in ("mean", "std", "seeds", "paper_mean", "paper_std")]
    csv_header += ["gcl_minus_er_mean", "gcl_minus_er_se", "gcl_minus_er_seeds", "paper_gcl_minus_er"]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


def cndpm_table(memory_runs: dict) -> tuple[str, str]:
    """The paper's appendix table on Split CIFAR10 (ER, CN-DPM, GCL at memory 500 and 1000), ours
    beside it; CN-DPM as the paper quotes it (no run of ours)."""
    groups = memory_runs.get("split_cifar10")
    if not groups:
        return "", ""
    sizes = sorted(published.PAPER_CNDPM)
    header = ["Method"] + [f"{s} {w}" for s in sizes for w in ("ours", "paper")]
    md_rows, csv_rows = [], []
    for m in ("er", "cndpm", "gcl"):
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
    caption = ("**GCL and CN-DPM by memory size on Split CIFAR10** (the paper's appendix table; test ACC %, "
               "mean ± std (n)). CN-DPM (Lee et al. 2020) is quoted as the paper quotes it; we do not run it.\n\n")
    csv_header = ["method"] + [f"m{s}_{c}" for s in sizes for c in ("mean", "std", "seeds", "paper_mean",
                                                                      "paper_std")]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


# ----------------------------------------------------------------------------- today's protocol
def today_table(runs) -> tuple[str, str]:
    """Every run of a benchmark of today's protocol (published.PUBLISHED_TODAY) by method, trunk
    and memory size: ours beside the published re-runs, and GCL − method and OnPro − method paired
    by seed (GCL on its preset's trunk, both at the row's memory size)."""
    groups = defaultdict(list)
    for run in runs:
        if run.benchmark in published.PUBLISHED_TODAY:
            model = run.config.get("model", {})
            trunk = f"{model.get('backbone')} {model.get('filters')}"
            groups[(run.benchmark, run.memory_size, run.method, trunk)].append(run)
    header = ["Benchmark", "Memory", "Method", "Trunk", "ACC ours", "FGT ours", "ACC published",
              "GCL − method (by seed)", "OnPro − method (by seed)"]
    md_rows, csv_rows = [], []

    def reference(b, size, method):
        found = [key for key in groups if key[:3] == (b, size, method)]
        return groups[min(found, key=lambda k: not _preset_trunk(groups[k]))] if found else []

    for key in sorted(groups, key=lambda k: (k[0], k[1] or 0, method_sort_key(k[2]), k[3])):
        b, size, method, trunk = key
        group = groups[key]
        acc, fgt = (mean_std(r.results[k] for r in group) for k in ("acc", "fgt"))
        pub = published.published_today(b, method, size)
        leads = [lead(group, ref) if ref and ref is not group else (float("nan"), float("nan"), 0)
                 for name, ref in (("gcl", reference(b, size, "gcl")), ("onpro", reference(b, size, "onpro")))]
        shown_pub = "-" if pub is None else (f"{pub[0]:.1f}" if pub[0] == pub[1] else f"{pub[0]:.1f}–{pub[1]:.1f}")
        md_rows.append([benchmark_label(b), str(size), method_label(method), trunk, fmt(*acc, show_n=True),
                        fmt(*fgt), shown_pub, *[fmt_change(*d) if d[2] else "-" for d in leads]])
        csv_rows.append([b, size, method, trunk, acc[2], num(acc[0]), num(acc[1]), num(fgt[0]), num(fgt[1]),
                         *(num(v) for v in (pub[:2] if pub else (None, None))),
                         *(num(v) for d in leads for v in d[:2])])
    if not md_rows:
        return "", ""
    caption = ("**Today's online protocol** (test %, mean ± sample std (n)): every method with the same in-step "
               "augmentation (crop, flip, colour jitter, grayscale) and a replay batch of 64. Published: the "
               "re-runs' ACC (a range spans a table's memory sizes 200-1000; their trunk: ResNet-18 with 64 "
               "filters). GCL − method and OnPro − method: the mean of the per-seed differences ± its standard "
               "error, against GCL (OnPro) on its preset's trunk at the row's memory size.\n\n")
    csv_header = ["benchmark", "memory_size", "method", "trunk", "seeds", "acc_mean", "acc_std", "fgt_mean",
                  "fgt_std", "published_low", "published_high", "gcl_minus_mean", "gcl_minus_se",
                  "onpro_minus_mean", "onpro_minus_se"]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


def _preset_trunk(group) -> bool:
    """Whether ``group`` (runs of one method and trunk) are the method's main runs (its preset's trunk)."""
    return any(r.is_main or r.variant == layout.memory_variant(r.method, r.memory_size) for r in group)
