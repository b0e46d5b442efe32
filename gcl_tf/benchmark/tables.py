"""The paper's tables from saved results: Markdown (for reading) and CSV (paper layout + tidy).

Every cell is the mean +- sample standard deviation (ddof=1) over the seeds found in
``DIR/runs`` (``layout.mean_std``); a cell with fewer seeds than the table's others says so.
"""
from __future__ import annotations

import os
from collections import defaultdict

from gcl_tf.benchmark import layout, published
from gcl_tf.benchmark.layout import benchmark_label, mean_std, method_label, method_sort_key
from gcl_tf.benchmark.table_format import csv_text as _csv
from gcl_tf.benchmark.table_format import fmt, fmt_change
from gcl_tf.benchmark.table_format import markdown as _markdown
from gcl_tf.benchmark.table_format import num as _num
from gcl_tf.io import write_atomic

# The paper's Tables 1 and 2: benchmarks as column groups. Other benchmarks go to table_other.
TABLE_GROUPS = (
    ("table1", "Table 1", ("permuted_mnist", "rotated_mnist", "split_svhn")),
    ("table2", "Table 2", ("split_cifar10", "split_cifar100", "split_miniimagenet")),
)
METRICS = (("acc", "ACC (↑)"), ("fgt", "FGT (↓)"))


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
    return caption + _markdown(header, md_rows), _csv(header, csv_rows)


def main_tidy_csv(summary: dict) -> str:
    header = ["benchmark", "method", "seeds"]
    for key in ("acc", "fgt", "bwt", "train_ms", "test_ms"):
        header += [f"{key}_mean", f"{key}_std"]
    rows = []
    for (b, m) in sorted(summary, key=lambda k: (k[0], method_sort_key(k[1]))):
        s = summary[(b, m)]
        row = [b, m, len(s["seeds"])]
        for key in ("acc", "fgt", "bwt", "train_ms", "test_ms"):
            row += [_num(s[key][0]), _num(s[key][1])]
        rows.append(row)
    return _csv(header, rows)


def timing_table(summary: dict) -> tuple[str, str]:
    header = ["Benchmark", "Method", "Training time per sample (ms)", "Testing time per sample (ms)",
              "Total training time (s)", "Total testing time (s)"]
    md_rows, csv_rows = [], []
    for (b, m) in sorted(summary, key=lambda k: (k[0], method_sort_key(k[1]))):
        s = summary[(b, m)]
        md_rows.append([benchmark_label(b), method_label(m), fmt(*s["train_ms"]), fmt(*s["test_ms"]),
                        fmt(*s["train_seconds"]), fmt(*s["eval_seconds"])])
        csv_rows.append([b, m, len(s["seeds"]), _num(s["train_ms"][0]), _num(s["train_ms"][1]),
                         _num(s["test_ms"][0]), _num(s["test_ms"][1]),
                         _num(s["train_seconds"][0]), _num(s["eval_seconds"][0])])
    caption = ("**Training and testing time.** Wall-clock seconds of the training steps (evaluation excluded) "
               "per stream sample, and of the task-end evaluations per evaluated sample; mean ± std over seeds. "
               "Absolute times depend on the machine and its load.\n\n")
    csv_header = ["benchmark", "method", "seeds", "train_ms_per_sample_mean", "train_ms_per_sample_std",
                  "test_ms_per_sample_mean", "test_ms_per_sample_std", "train_seconds_mean", "eval_seconds_mean"]
    return caption + _markdown(header, md_rows), _csv(csv_header, csv_rows)


# ----------------------------------------------------------------------------- against the paper
def vs_paper_table(runs) -> tuple[str, str]:
    """Ours beside the paper's Tables 1 and 2 on the benchmarks the paper has numbers for: ACC and
    FGT, ours mean ± std (n) and the paper's (n = 5), and GCL's ACC lead over each method, ours
    paired by seed (mean difference ± its standard error over the seeds both ran) beside the
    paper's difference of means."""
    main = defaultdict(list)
    for run in runs:
        if run.is_main:
            main[(run.benchmark, run.variant)].append(run)
    benchmarks = [b for b in published.PAPER_RESULTS if any(key[0] == b for key in main)]
    header = ["Benchmark", "Method", "ACC ours", "ACC paper", "FGT ours", "FGT paper",
              "GCL − method, ACC ours (paired by seed)", "GCL − method, ACC paper"]
    md_rows, csv_rows = [], []
    for b in benchmarks:
        methods_here = {m for (bench, m) in main if bench == b} | set(published.PAPER_RESULTS[b])
        gcl = main.get((b, "gcl"), [])
        for m in sorted(methods_here, key=method_sort_key):
            group = main.get((b, m), [])
            ours = {k: mean_std(r.results[k] for r in group) for k in ("acc", "fgt")}
            paper = {k: published.paper_result(b, m, k) for k in ("acc", "fgt")}
            lead = (change_vs_full(group, gcl, "acc") if m != "gcl" and group and gcl
                    else (float("nan"), float("nan"), 0))
            paper_lead = published.paper_lead(b, m) if m != "gcl" else None
            md_rows.append([benchmark_label(b), method_label(m),
                            *[cell for k in ("acc", "fgt") for cell in (
                                fmt(*ours[k], show_n=True),
                                "-" if paper[k] is None else fmt(*paper[k], published.PAPER_SEEDS))],
                            "" if m == "gcl" else fmt_change(*lead),
                            "" if paper_lead is None else f"{paper_lead:+.2f}"])
            csv_rows.append([b, m, ours["acc"][2], *[_num(v) for k in ("acc", "fgt") for v in (
                                ours[k][0], ours[k][1], *(paper[k] or (None, None)))],
                             lead[2] or "", _num(lead[0]), _num(lead[1]), _num(paper_lead)])
    if not md_rows:
        return "", ""
    caption = ("**Ours against the paper** (test %; ours: mean ± sample std over the seeds (n); the paper's: "
               f"mean ± std over its {published.PAPER_SEEDS} seeds; `-`: not run). The last two columns: GCL's "
               "ACC lead over the row's method, ours as the mean of the per-seed differences ± its standard "
               "error, the paper's as the difference of its means.\n\n")
    csv_header = ["benchmark", "method", "seeds", "acc_mean", "acc_std", "paper_acc_mean", "paper_acc_std",
                  "fgt_mean", "fgt_std", "paper_fgt_mean", "paper_fgt_std",
                  "gcl_lead_seeds", "gcl_lead_mean", "gcl_lead_se", "paper_gcl_lead"]
    return caption + _markdown(header, md_rows), _csv(csv_header, csv_rows)


# ----------------------------------------------------------------------------- ablation
def ablation_runs(runs) -> dict:
    """{benchmark: {variant: [runs]}} for the benchmarks with an ablation variant of GCL."""
    by_bench = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.variant in layout.ABLATION_VARIANTS:
            by_bench[run.benchmark][run.variant].append(run)
    return {b: dict(v) for b, v in by_bench.items() if any(k != "gcl" for k in v)}


def components(config: dict) -> dict:
    """Which of GCL's components a run's config keeps (the rows of the paper's ablation table)."""
    method = config.get("method", {})
    stochastic = bool(method.get("stochastic_graphs", True))
    return {
        "Graph regularization": float(method.get("graph_lambda", 0)) > 0,
        "Multiple graph samples": stochastic and int(method.get("test_graph_samples", 1)) > 1,
        "Random G & A": stochastic,
        "Deterministic G & A": not stochastic,
    }


def change_vs_full(full: list, runs: list, key: str) -> tuple[float, float, int]:
    """A variant's change of ``key`` against full GCL, paired by seed (the seeds both ran)."""
    by_seed = {r.seed: r.results.get(key) for r in full}
    return layout.paired_difference([(by_seed[r.seed], r.results.get(key)) for r in runs if r.seed in by_seed])


def ablation_table(runs) -> tuple[str, str]:
    """The paper's Table 3 per benchmark, and each variant's change against full GCL paired by
    seed (mean difference ± its standard error): whether removing a component moves the result
    by more than the seeds' spread."""
    md_parts, csv_rows = [], []
    for b, variants in sorted(ablation_runs(runs).items()):
        order = [v for v in layout.ABLATION_VARIANTS if v in variants]
        comps = {v: components(variants[v][0].config) for v in order}
        stats = {v: {k: mean_std(r.results[k] for r in variants[v]) for k in ("acc", "fgt")} for v in order}
        full_n = max(s["acc"][2] for s in stats.values())
        labels = {name: label for name, label, _ in layout.ABLATIONS}
        header = ["", *[f"{labels[v]} (`{v}`)" for v in order]]
        rows = [[name] + ["✓" if comps[v][name] else "×" for v in order] for name in next(iter(comps.values()))]
        rows.append(["Average accuracy (%)"] + [fmt(*stats[v]["acc"], full_n=full_n) for v in order])
        rows.append(["Average forgetting (%)"] + [fmt(*stats[v]["fgt"], full_n=full_n) for v in order])
        full = variants.get("gcl", [])
        changes = {v: {k: change_vs_full(full, variants[v], k) for k in ("acc", "fgt")} for v in order}
        if full:
            for key, name in (("acc", "accuracy"), ("fgt", "forgetting")):
                rows.append([f"Change in {name} vs full GCL, paired by seed"]
                            + ["" if v == "gcl" else fmt_change(*changes[v][key]) for v in order])
        md_parts.append(f"**Ablation study on {benchmark_label(b)}** (mean ± std over {full_n} seed(s); each "
                        "column removes one more component).\n\n" + _markdown(header, rows))
        for v in order:
            c = comps[v]
            csv_rows.append([b, v, *[int(c[name]) for name in c], stats[v]["acc"][2],
                             _num(stats[v]["acc"][0]), _num(stats[v]["acc"][1]),
                             _num(stats[v]["fgt"][0]), _num(stats[v]["fgt"][1]),
                             changes[v]["acc"][2] if v != "gcl" else "",
                             *[_num(changes[v][k][i]) if v != "gcl" else "" for k in ("acc", "fgt") for i in (0, 1)]])
    header = ["benchmark", "variant", "graph_regularization", "multiple_graph_samples", "random_graphs",
              "deterministic_graphs", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std",
              "paired_seeds", "acc_change_mean", "acc_change_se", "fgt_change_mean", "fgt_change_se"]
    return "\n".join(md_parts), _csv(header, csv_rows)


# ----------------------------------------------------------------------------- memory study
def memory_runs(runs) -> dict:
    """{benchmark: {(method, memory_size): [runs]}} for the benchmarks with a memory-study run;
    the main ER/GCL runs count at their preset's memory size."""
    studied = {r.benchmark for r in runs if r.memory_size is not None
               and r.variant == layout.memory_variant(r.method, r.memory_size)}
    out = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.benchmark not in studied or run.method not in layout.MEMORY_METHODS:
            continue
        if run.is_main or run.variant == layout.memory_variant(run.method, run.memory_size):
            out[run.benchmark][(run.method, int(run.memory_size))].append(run)
    return {b: dict(v) for b, v in out.items()}


def memory_summary(runs) -> dict:
    """{benchmark: {(method, size): {"acc": (mean, std, n), "fgt": ...}}}."""
    return {b: {key: {k: mean_std(r.results[k] for r in group) for k in ("acc", "fgt")}
                for key, group in groups.items()}
            for b, groups in memory_runs(runs).items()}


def memory_table(runs) -> tuple[str, str]:
    md_parts, csv_rows = [], []
    for b, stats in sorted(memory_summary(runs).items()):
        sizes = sorted({size for (_, size) in stats})
        methods = sorted({m for (m, _) in stats}, key=method_sort_key)
        full_n = max(s["acc"][2] for s in stats.values())
        for key, label in METRICS:
            rows = [[method_label(m)] + [fmt(*stats[(m, s)][key], full_n=full_n) if (m, s) in stats else "-"
                                         for s in sizes] for m in methods]
            md_parts.append(f"**Memory size on {benchmark_label(b)}: {label}** (mean ± std over {full_n} seed(s)).\n\n"
                            + _markdown(["Method"] + [str(s) for s in sizes], rows))
        for (m, s) in sorted(stats, key=lambda k: (method_sort_key(k[0]), k[1])):
            st = stats[(m, s)]
            csv_rows.append([b, m, s, st["acc"][2], _num(st["acc"][0]), _num(st["acc"][1]),
                             _num(st["fgt"][0]), _num(st["fgt"][1])])
    header = ["benchmark", "method", "memory_size", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std"]
    return "\n".join(md_parts), _csv(header, csv_rows)


# ----------------------------------------------------------------------------- backbone study
def backbone_runs(runs) -> dict:
    """{benchmark: {(method, trunk): [runs]}} on the benchmarks with a backbone-study run
    (``<method>-<trunk>``), for the methods with one and for GCL (the method each row is compared
    with): those runs, and the methods' main runs under the trunk of their preset
    (``layout.trunk_of``; a preset on another trunk is left out)."""
    variants = {layout.backbone_variant(r.method, t): t for r in runs for t in layout.BACKBONES}
    studied = {(r.benchmark, r.method) for r in runs if r.variant in variants}
    studied |= {(b, "gcl") for b, _ in studied}
    out = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if (run.benchmark, run.method) not in studied:
            continue
        trunk = layout.trunk_of(run.config.get("model", {})) if run.is_main else variants.get(run.variant)
        if trunk is not None:
            out[run.benchmark][(run.method, trunk)].append(run)
    return {b: dict(v) for b, v in out.items()}


def backbone_table(runs) -> tuple[str, str]:
    """Methods x trunks on each benchmark of the backbone study: ACC and FGT, mean ± std (n), and
    on each trunk GCL's ACC lead over the method, paired by seed (mean difference ± its standard
    error over the seeds both ran on that trunk)."""
    md_parts, csv_rows = [], []
    for b, groups in sorted(backbone_runs(runs).items()):
        stats = {key: {k: mean_std(r.results[k] for r in group) for k in ("acc", "fgt")}
                 for key, group in groups.items()}
        leads = {(m, t): change_vs_full(group, groups[("gcl", t)], "acc")
                 for (m, t), group in groups.items() if m != "gcl" and ("gcl", t) in groups}
        trunks = [t for t in layout.BACKBONES if any(key[1] == t for key in groups)]
        methods = sorted({m for (m, _) in groups}, key=method_sort_key)
        header = (["Method"] + [f"{layout.BACKBONES[t][0]} {label}" for t in trunks for _, label in METRICS]
                  + [f"GCL − method, {layout.BACKBONES[t][0]} ACC (paired by seed)" for t in trunks])
        rows = []
        for m in methods:
            cells = [fmt(*stats[(m, t)][k], show_n=True) if (m, t) in stats else "-"
                     for t in trunks for k, _ in METRICS]
            lead = ["" if m == "gcl" else fmt_change(*leads[(m, t)]) if (m, t) in leads else "-" for t in trunks]
            own = [t for t in trunks if (m, t) in groups and groups[(m, t)][0].is_main]
            rows.append([method_label(m), *cells, *lead, layout.BACKBONES[own[0]][0] if own else "-"])
        keys = "; ".join(f"{layout.BACKBONES[t][0]}: " + ", ".join(layout.backbone_overrides(t)) for t in trunks)
        md_parts.append(f"**Backbones on {benchmark_label(b)}** (%, mean ± sample std over the seeds (n)): each "
                        f"method's preset with only the trunk replaced ({keys}); on the preset's trunk, its main "
                        "run. GCL's lead: its ACC minus the method's on the same trunk, the mean of the per-seed "
                        "differences ± its standard error (`-`: GCL or the method not run on that trunk).\n\n"
                        + _markdown(header + ["Preset's trunk"], rows))
        for (m, t) in sorted(groups, key=lambda k: (method_sort_key(k[0]), list(layout.BACKBONES).index(k[1]))):
            st = stats[(m, t)]
            lead = leads.get((m, t), (float("nan"), float("nan"), 0))
            csv_rows.append([b, m, t, groups[(m, t)][0].variant, st["acc"][2], _num(st["acc"][0]), _num(st["acc"][1]),
                             _num(st["fgt"][0]), _num(st["fgt"][1]), lead[2] or "", _num(lead[0]), _num(lead[1])])
    header = ["benchmark", "method", "backbone", "variant", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std",
              "gcl_lead_seeds", "gcl_lead_mean", "gcl_lead_se"]
    return "\n".join(md_parts), _csv(header, csv_rows)


# ----------------------------------------------------------------------------- graph_lambda study
def graph_lambda_runs(runs) -> dict:
    """{benchmark: {graph_lambda: [runs]}} on the benchmarks with a graph_lambda-study run
    (``gcl-graph_lambda<value>``): those runs, the main GCL runs (the preset's value) and the
    ablation's no-regularisation runs (0): every GCL run whose only change is graph_lambda."""
    def value(run):
        return float(run.config.get("method", {}).get("graph_lambda", float("nan")))

    studied = {r.benchmark for r in runs if r.variant == layout.graph_lambda_variant(value(r))}
    out = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.benchmark in studied and run.method == "gcl" and (
                run.variant in ("gcl", layout.NO_GRAPH_REG) or run.variant == layout.graph_lambda_variant(value(run))):
            out[run.benchmark][value(run)].append(run)
    return {b: dict(v) for b, v in out.items()}


def graph_lambda_summary(runs) -> dict:
    """{benchmark: {graph_lambda: {"acc": (mean, std, n), "fgt": ..., "learning_accuracy": ...,
    "variant": folder}}} (learning accuracy: each task's accuracy right after it was learned,
    averaged; what a strong regulariser costs shows there)."""
    return {b: {lam: {**{k: mean_std(r.results.get(k) for r in group) for k in ("acc", "fgt", "learning_accuracy")},
                      "variant": group[0].variant}
                for lam, group in groups.items()}
            for b, groups in graph_lambda_runs(runs).items()}


def graph_lambda_table(runs) -> tuple[str, str]:
    """GCL's ACC, FGT and learning accuracy at each graph_lambda (the paper's figure of λ_G as a
    table), and each value's change against the preset's (the main run's), paired by seed."""
    md_parts, csv_rows = [], []
    summary = graph_lambda_summary(runs)
    for b, groups in sorted(graph_lambda_runs(runs).items()):
        preset = next((lam for lam, stats in summary[b].items() if stats["variant"] == "gcl"), None)
        header = ["λ_G (`method.graph_lambda`)", "Run", "ACC (↑)", "FGT (↓)", "Learning accuracy (↑)"]
        if preset is not None:
            header += [f"Change in ACC vs λ_G {preset:g}, paired by seed", f"Change in FGT vs λ_G {preset:g}"]
        rows = []
        for lam in sorted(groups):
            group, stats = groups[lam], summary[b][lam]
            changes = {k: change_vs_full(groups[preset], group, k) if preset is not None and lam != preset
                       else (float("nan"), float("nan"), 0) for k in ("acc", "fgt")}
            row = [f"{lam:g}" + (" (preset)" if lam == preset else ""), f"`{group[0].variant}`",
                   *[fmt(*stats[k], show_n=True) for k in ("acc", "fgt", "learning_accuracy")]]
            if preset is not None:
                row += ["" if lam == preset else fmt_change(*changes[k]) for k in ("acc", "fgt")]
            rows.append(row)
            csv_rows.append([b, repr(lam), group[0].variant, stats["acc"][2], _num(stats["acc"][0]),
                             _num(stats["acc"][1]), _num(stats["fgt"][0]), _num(stats["fgt"][1]),
                             changes["acc"][2] or "", *[_num(changes[k][i]) for k in ("acc", "fgt") for i in (0, 1)],
                             _num(stats["learning_accuracy"][0]), _num(stats["learning_accuracy"][1])])
        md_parts.append(f"**Graph regularisation on {benchmark_label(b)}** (%, mean ± sample std over the seeds (n)): "
                        "GCL's preset with only λ_G changed; the preset's value is the main run, 0 the ablation's "
                        "no-regularisation run. Learning accuracy: each task's accuracy right after it was learned, "
                        "averaged (what regularisation costs in learning new tasks).\n\n" + _markdown(header, rows))
    header = ["benchmark", "graph_lambda", "variant", "seeds", "acc_mean", "acc_std", "fgt_mean", "fgt_std",
              "paired_seeds", "acc_change_mean", "acc_change_se", "fgt_change_mean", "fgt_change_se",
              "learning_accuracy_mean", "learning_accuracy_std"]
    return "\n".join(md_parts), _csv(header, csv_rows)


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
        put("main_results.csv", main_tidy_csv(summary))
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

    for name, (md, table_csv) in (("memory_vs_paper", beside_published.memory_vs_paper_table(memory_runs(runs))),
                                  ("cndpm", beside_published.cndpm_table(memory_runs(runs))),
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
