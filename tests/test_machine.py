"""The machine a run records in results.json (gcl_tf/machine.py), and the suite's dry run saying
when its estimate reads runs of another machine."""
from gcl_tf import machine
from gcl_tf.benchmark.dry_run import other_machines_note

AVX512 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw
processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw
"""
AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_1 sse4_2 avx avx2 fma\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes\nCPU implementer\t: 0x41\n"


def test_cpuinfo_gives_the_model_and_the_widest_vector_extension():
    assert machine.parse_cpuinfo(AVX512) == ("AMD EPYC 9R14", "avx512")
    assert machine.parse_cpuinfo(AVX2) == ("AMD EPYC", "avx2")
    assert machine.parse_cpuinfo(ARM) == (None, None)  # no model name, no x86 extension
    assert machine.parse_cpuinfo("") == (None, None)


def test_describe_reads_the_file_and_falls_back_to_the_architecture(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(AVX2)
    described = machine.describe(str(path))
    assert described["cpu"] == "AMD EPYC" and described["isa"] == "avx2" and described["cpus"] >= 1
    assert machine.label(described) == f"AMD EPYC (avx2, {described['cpus']} CPUs)"
    missing = machine.describe(str(tmp_path / "none"))
    assert missing["isa"] is None and missing["cpu"]  # platform.machine(), e.g. x86_64
    assert machine.label(None) == "an unrecorded machine"


def test_the_estimate_names_the_other_machines_it_reads():
    here = {"cpu": "AMD EPYC", "isa": "avx2", "cpus": 2}
    fast = {"cpu": "AMD EPYC", "isa": "avx512", "cpus": 2}
    assert other_machines_note([here, dict(here)], here) is None
    note = other_machines_note([here, fast, fast, None], here)
    assert note == ("note: the estimate reads 2 runs on AMD EPYC (avx512, 2 CPUs), 1 run on an unrecorded machine; "
                    "this is AMD EPYC (avx2, 2 CPUs): times differ between machines (a running run's progress "
                    "line gives this machine's)")


def test_a_table_of_times_says_when_its_runs_ran_on_several_machines():
    here = {"cpu": "AMD EPYC", "isa": "avx2", "cpus": 2}
    assert machine.mixed([here, dict(here)]) == ""
    assert machine.mixed([here, None, None]) == "1 run on AMD EPYC (avx2, 2 CPUs), 2 runs on an unrecorded machine"
    assert machine.mixed([None]) == "1 run on an unrecorded machine"  # unknown: not "one machine"


def test_the_memory_tables_time_caption_names_the_machines():
    from gcl_tf.benchmark import layout, study_tables

    def run(variant, seed, seconds, ran_on):
        method, size = variant.split("-memory")[0], int(variant.split("memory")[1])
        results = {"acc": 50.0, "fgt": 10.0, "train_seconds": seconds, "method": method,
                   "config": {"method": {"name": method, "memory_size": size}}}
        if ran_on:
            results["machine"] = ran_on
        return layout.RunResult("split_cifar10", variant, seed, "/x", results)

    fast = {"cpu": "AMD EPYC", "isa": "avx512", "cpus": 2}
    same = [run("er-memory100", 0, 600.0, fast), run("er-memory200", 0, 900.0, fast)]
    md, _ = study_tables.memory_table(same)
    assert "machines" not in md
    md, _ = study_tables.memory_table(same + [run("er-memory500", 0, 3000.0, None)])
    assert ("the runs' machines: 2 runs on AMD EPYC (avx512, 2 CPUs), 1 run on an unrecorded machine (times of "
            "different machines do not compare)") in md


def test_the_timing_table_names_each_rows_machines_when_its_runs_ran_on_several():
    from gcl_tf.benchmark import layout, tables

    def run(method, seed, ran_on):
        results = {"acc": 50.0, "fgt": 10.0, "bwt": -10.0, "train_seconds": 100.0, "eval_seconds": 5.0,
                   "train_steps": 10, "eval_samples": 100, "method": method,
                   "config": {"method": {"name": method}, "train": {"batch_size": 10}}}
        if ran_on:
            results["machine"] = ran_on
        return layout.RunResult("split_cifar10", method, seed, "/x", results)

    fast, slow = {"cpu": "AMD EPYC", "isa": "avx512", "cpus": 2}, {"cpu": "AMD EPYC", "isa": "avx2", "cpus": 2}
    one = [run("er", 0, fast), run("er", 1, fast), run("gcl", 0, fast)]
    md, csv = tables.timing_table(tables.main_summary(one))
    assert "Machines" not in md and "several machines" not in md
    assert csv.splitlines()[0].endswith(",machines") and "2 runs on AMD EPYC (avx512, 2 CPUs)" in csv
    unrecorded, _ = tables.timing_table(tables.main_summary([run("er", 0, None), run("gcl", 0, None)]))
    assert "Machines" not in unrecorded  # nothing known: no claim either way
    md, _ = tables.timing_table(tables.main_summary(one + [run("gcl", 1, slow)]))
    assert "these runs ran on several machines (Machines), whose times do not compare" in md
    rows = {line.split(" | ")[1]: line for line in md.splitlines() if line.startswith("| Split CIFAR10")}
    assert rows["ER"].endswith("| 2 runs on AMD EPYC (avx512, 2 CPUs) |")
    assert rows["GCL"].endswith("| 1 run on AMD EPYC (avx2, 2 CPUs), 1 run on AMD EPYC (avx512, 2 CPUs) |")
