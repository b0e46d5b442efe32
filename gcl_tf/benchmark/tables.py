"""The paper's tables from saved results: Markdown (for reading) and CSV (paper layout + tidy).

Every cell is the mean +- sample standard deviation (ddof=1) over the seeds found in
``DIR/runs`` (``layout.mean_std``); a cell with fewer seeds than the table's others says so.
"""
from __future__ import annotations

import os
from collections import defaultdict

from gcl_tf import machine
from gcl_tf.benchmark import layout, published, roles
from gcl_tf.benchmark.cells import METRICS, change_vs_full, csv_text, fmt, fmt_change, markdown, num
from gcl_tf.benchmark.layout import benchmark_label, mean_std, method_label, method_sort_key
from gcl_tf.benchmark.study_tables import ablation_table, backbone_table, graph_lambda_table, memory_table
from gcl_tf.io import write_atomic

# The paper's Tables 1 and 2: benchmarks as column groups. Other benchmarks go to table_other.
TABLE_GROUPS = (
    ("table1", "Table 1", ("permuted_mnist", "rotated_mnist", "split_svhn")),
    ("table2", "Table 2", ("split_cifar10", "split_cifar100", "split_miniimagenet")),
)


# ----------------------------------------------------------------------------- main tables
def main_summary(runs: list[layout.RunResult]) -> dict:
    """{(benchmark, method): {metric: (mean, std, n)}} over the main runs' seeds."""
    grouped = defaultdict(list)
    for run in runs:
        if run.is_main:
            grouped[(run.benchmark, run.variant)].append(run)
    summary = {}
    for key, group in grouped.items():
        summary[key] = {
            "acc": mean_std(r.results["acc"] for r in group),
            "fgt": mean_std(r.results["fgt"] for r in group),
            "bwt": mean_std(r.results.get("bwt") for r in group),
            "train_ms": mean_std(r.train_ms_per_sample() for r in group),
            "test_ms": mean_std(r.test_ms_per_sample() for r in group),
            "train_seconds": mean_std(r.results["train_seconds"] for r in group),
            "eval_seconds": mean_std(r.results["eval_seconds"] for r in group),
            "seeds": sorted(r.seed for r in group),
            "machines": [r.results.get("machine") for r in group],  # results.json's, None where unrecorded
        }
    return summary


def table_groups(benchmarks) -> list[tuple[str, str, list[str]]]:
    """The paper's groups restricted to the benchmarks present, then the others."""
    present = set(benchmarks)
    groups, placed = [], set()
    for name, title, members in TABLE_GROUPS:
        chosen = [b for b in members if b in present]
        placed.update(chosen)
        if chosen:
            groups.append((name, title, chosen))
    others = sorted(present - placed)
    if others:
        groups.append(("table_other", "Other benchmarks", others))
    return groups


def paper_table(summary: dict, title: str, benchmarks: list[str]) -> tuple[str, str]:
    """One table in the paper's layout: methods as rows, (ACC, FGT) per benchmark as columns."""
    methods = sorted({m for (b, m) in summary if b in benchmarks}, key=method_sort_key)
    counts = [summary[(b, m)]["acc"][2] for (b, m) in summary if b in benchmarks]
    full_n = max(counts) if counts else 0
    header = ["Method"] + [f"{benchmark_label(b)} {label}" for b in benchmarks for _, label in METRICS]
    md_rows, csv_rows = [], []
    for m in methods:
        cells = []
        for b in benchmarks:
            for key, _ in METRICS:
                stats = summary.get((b, m), {}).get(key, (float("nan"), float("nan"), 0))
                cells.append(fmt(*stats, full_n=full_n))
        md_rows.append([method_label(m)] + cells)
        csv_rows.append([method_label(m)] + cells)
    caption = (f"**{title}.** Classification results (%): mean ± sample std (ddof=1) over {full_n} seed(s); "
               "ACC higher is better, FGT lower is better.\n\n")
    return caption + markdown(header, md_rows), csv_text(header, csv_rows)


def main_tidycsv_text(summary: dict) -> str:
    header = ["benchmark", "method", "seeds"]
    for key in ("acc", "fgt", "bwt", "train_ms", "test_ms"):
        header += [f"{key}_mean", f"{key}_std"]
    rows = []
    for (b, m) in sorted(summary, key=lambda k: (k[0], method_sort_key(k[1]))):
        s = summary[(b, m)]
        row = [b, m, len(s["seeds"])]
        for key in ("acc", "fgt", "bwt", "train_ms", "test_ms"):
            row += [num(s[key][0]), num(s[key][1])]
        rows.append(row)
    return csv_text(header, rows)


def timing_table(summary: dict) -> tuple[str, str]:
    """Times per method; when the runs ran on several machines (results.json's ``machine``), a
    column says where each row's ran, since times of different machines do not compare."""
    keys = sorted(summary, key=lambda k: (k[0], method_sort_key(k[1])))
    several = len({machine.label(m) for key in keys for m in summary[key]["machines"]}) > 1  # all unrecorded: unknown
    header = ["Benchmark", "Method", "Training time per sample (ms)", "Testing time per sample (ms)",
              "Total training time (s)", "Total testing time (s)"] + (["Machines"] if several else [])
    md_rows, csv_rows = [], []
    for key in keys:
        (b, m), s = key, summary[key]
        md_rows.append([benchmark_label(b), method_label(m), fmt(*s["train_ms"]), fmt(*s["test_ms"]),
                        fmt(*s["train_seconds"]), fmt(*s["eval_seconds"])]
                       + ([machine.where(s["machines"])] if several else []))
        csv_rows.append([b, m, len(s["seeds"]), num(s["train_ms"][0]), num(s["train_ms"][1]),
                         num(s["test_ms"][0]), num(s["test_ms"][1]),
                         num(s["train_seconds"][0]), num(s["eval_seconds"][0]), machine.where(s["machines"])])
    caption = ("**Training and testing time.** Wall-clock seconds of the training steps (evaluation excluded) "
               "per stream sample, and of the task-end evaluations per evaluated sample; mean ± std over seeds. "
               "Absolute times depend on the machine and its load"
               + ("; these runs ran on several machines (Machines), whose times do not compare" if several else "")
               + ".\n\n")
    csv_header = ["benchmark", "method", "seeds", "train_ms_per_sample_mean", "train_ms_per_sample_std",
                  "test_ms_per_sample_mean", "test_ms_per_sample_std", "train_seconds_mean", "eval_seconds_mean",
                  "machines"]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


# ----------------------------------------------------------------------------- against the paper
def vs_paper_table(runs) -> tuple[str, str]:
    """Ours beside the paper's Tables 1 and 2 on the benchmarks the paper has numbers for: ACC and
    FGT, ours mean ± std (n) and the paper's (n = 5), and the lead method's (GCL's) ACC lead over
    each method, ours paired by seed (mean difference ± its standard error over the seeds both
    ran) beside the paper's difference of means."""
    main = defaultdict(list)
    for run in runs:
        if run.is_main:
            main[(run.benchmark, run.variant)].append(run)
    benchmarks = [b for b in published.PAPER_RESULTS if any(key[0] == b for key in main)]
    if not benchmarks:
        return "", ""
    lead, name = roles.LEAD, method_label(roles.LEAD)
    header = ["Benchmark", "Method", "ACC ours", "ACC paper", "FGT ours", "FGT paper",
              f"{name} − method, ACC ours (paired by seed)", f"{name} − method, ACC paper"]
    md_rows, csv_rows = [], []
    for b in benchmarks:
        methods_here = {m for (bench, m) in main if bench == b} | set(published.PAPER_RESULTS[b])
        leading = main.get((b, lead), [])
        for m in sorted(methods_here, key=method_sort_key):
            group = main.get((b, m), [])
            ours = {k: mean_std(r.results[k] for r in group) for k in ("acc", "fgt")}
            paper = {k: published.paper_result(b, m, k) for k in ("acc", "fgt")}
            ahead = (change_vs_full(group, leading, "acc") if m != lead and group and leading
                     else (float("nan"), float("nan"), 0))
            paper_lead = published.paper_lead(b, m, lead) if m != lead else None
            md_rows.append([benchmark_label(b), method_label(m),
                            *[cell for k in ("acc", "fgt") for cell in (
                                fmt(*ours[k], show_n=True),
                                "-" if paper[k] is None else fmt(*paper[k], published.PAPER_SEEDS))],
                            "" if m == lead else fmt_change(*ahead),
                            "" if paper_lead is None else f"{paper_lead:+.2f}"])
            csv_rows.append([b, m, ours["acc"][2], *[num(v) for k in ("acc", "fgt") for v in (
                                ours[k][0], ours[k][1], *(paper[k] or (None, None)))],
                             ahead[2] or "", num(ahead[0]), num(ahead[1]), num(paper_lead)])
    if not md_rows:
        return "", ""
    caption = ("**Ours against the paper** (test %; ours: mean ± sample std over the seeds (n); the paper's: "
               f"mean ± std over its {published.PAPER_SEEDS} seeds; `-`: not run). The last two columns: {name}'s "
               "ACC lead over the row's method, ours as the mean of the per-seed differences ± its standard "
               "error, the paper's as the difference of its means.\n\n")
    csv_header = ["benchmark", "method", "seeds", "acc_mean", "acc_std", "paper_acc_mean", "paper_acc_std",
                  "fgt_mean", "fgt_std", "paper_fgt_mean", "paper_fgt_std",
                  f"{lead}_lead_seeds", f"{lead}_lead_mean", f"{lead}_lead_se", f"paper_{lead}_lead"]
    return caption + markdown(header, md_rows), csv_text(csv_header, csv_rows)


# ----------------------------------------------------------------------------- all tables
def write_tables(output: str, runs) -> list[str]:
    """Write every table into ``output/tables``; returns the paths written."""
    folder = os.path.join(output, layout.TABLES)
    written = []

    def put(name: str, text: str) -> None:
        path = os.path.join(folder, name)
        write_atomic(path, text)
        written.append(path)

    summary = main_summary(runs)
    for name, title, benchmarks in table_groups(b for (b, _) in summary):
        md, table_csv = paper_table(summary, title, benchmarks)
        put(f"{name}.md", md)
        put(f"{name}.csv", table_csv)
    if summary:
        put("main_results.csv", main_tidycsv_text(summary))
        md, table_csv = timing_table(summary)
        put("timing.md", md)
        put("timing.csv", table_csv)
    md, table_csv = vs_paper_table(runs)
    if md:
        put("vs_paper.md", md)
        put("vs_paper.csv", table_csv)
    md, table_csv = ablation_table(runs)
    if md:
        put("ablation.md", md)
        put("ablation.csv", table_csv)
    md, table_csv = memory_table(runs)
    if md:
        put("memory.md", md)
        put("memory.csv", table_csv)
    from gcl_tf.benchmark import beside_published
    from gcl_tf.benchmark.study_tables import memory_runs

    memory = memory_runs(runs)
    for name, (md, table_csv) in (("memory_vs_paper", beside_published.memory_vs_paper_table(memory)),
                                  ("cndpm", beside_published.cndpm_table(memory)),
                                  ("today", beside_published.today_table(runs))):
        if md:
            put(f"{name}.md", md)
            put(f"{name}.csv", table_csv)
    md, table_csv = backbone_table(runs)
    if md:
        put("backbone.md", md)
        put("backbone.csv", table_csv)
    md, table_csv = graph_lambda_table(runs)
    if md:
        put("graph_lambda.md", md)
        put("graph_lambda.csv", table_csv)
    return written
