"""The GPU check (``python -m gcl_tf.benchmark gpu``), exercised on the CPU: ``--device cpu``
splits the CPU into a host (CPU:0) and two devices under test (CPU:1, CPU:2), so that every
assertion and output runs here; on a GPU machine only the device strings differ."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, fresh_env, run_script


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(capsys):
    import tensorflow as tf

    from gcl_tf.speed import gpu

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    assert gpu.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("no GPU visible to TensorFlow"), out


def test_bad_variants_are_one_line_exit_2(capsys):
    from gcl_tf.speed import gpu

    for bad in ("float32,float64", "mixed_bfloat16"):  # unknown; no float32 baseline
        with pytest.raises(SystemExit) as info:
            gpu.main(["--variants", bad])
        assert info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --variants:"), err


def test_a_torch_that_does_not_import_skips_the_anchor_in_one_line(tmp_path, monkeypatch):
    from gcl_tf.speed.gcl import gpu

    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no torch here')\n")
    monkeypatch.setenv("PYTHONPATH", f"{shadow.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    info, note = gpu.torch_probe("GPU")
    assert info is None and "\n" not in note and note.startswith("PyTorch anchor skipped: torch is not importable")
    report = gpu.anchor_section(gpu.Devices("GPU", "/GPU:0", ["/GPU:0"]), [], False, lambda text: None)
    assert report == {"note": note, "runs": {}}


# The placement analysis against a step that does copy the memory to the host: the same GCL
# step on CPU:1, once as it is and once with one extra op pinned to the host (CPU:0) that reads
# two memory images (a gather, then a sum on the host): the analysis must find exactly that copy.
LEAK = textwrap.dedent("""\
    import json, sys
    import tensorflow as tf
    from gcl_tf.benchmark import workloads
    from gcl_tf.speed.gcl import gpu
    devices = gpu.setup_devices("cpu")
    report = {}
    for leak in (False, True):
        with tf.device(devices.single):
            model = workloads.make_model("gcl", (28, 28, 1), memory=20, hidden=16)
            if leak:
                learn = model.learn
                def leaky(x, y):
                    logs = learn(x, y)
                    with tf.device("/CPU:0"):
                        logs["leak"] = tf.reduce_sum(tf.gather(model.memory.images, [0, 1]))
                    return logs
                model.learn = leaky
            step, traces = workloads.counting_step(model)
            x, y = workloads.random_batches((28, 28, 1), 3, seed=3)
            def run():
                for i in range(3):
                    float(step(tf.constant(x[i * 10:(i + 1) * 10]), tf.constant(y[i * 10:(i + 1) * 10]))["loss"])
            result = gpu.check_step(run, lambda: len(traces), devices)
        result.update(gpu.check_variables(model, devices, [devices.single]))
        report[str(leak)] = result
    print("REPORT " + json.dumps(report))
""")


@pytest.mark.slow
def test_the_placement_analysis_finds_a_memory_copy_to_the_host(tmp_path):
    report = run_script(tmp_path / "leak.py", LEAK, timeout=600)
    clean, leaky = report["False"], report["True"]
    for r in (clean, leaky):
        assert r["misplaced"] == [] and r["traces"] == 1 and r["functions"] >= 1
        assert {"memory/images:0", "memory/edge_logits:0"} <= set(r["memory_variables"])
        assert r["random_ops_on_device"] >= 1 and r["random_ops_on_host"] == []  # the graph noise
    assert clean["variable_contents_to_host"] == []
    assert len(leaky["variable_contents_to_host"]) == 1, leaky["variable_contents_to_host"]
    assert "CPU:1 -> " in leaky["variable_contents_to_host"][0] and "CPU:0" in leaky["variable_contents_to_host"][0]


@pytest.mark.slow
def test_the_whole_check_runs_on_cpu_devices_and_writes_its_report(tmp_path):
    """The command itself, end to end on the logical CPU devices (quick; two variants, one with
    mixed precision and XLA): tables, JSON, the verdict, the mirrored run, every assertion."""
    proc = subprocess.run([sys.executable, "-m", "gcl_tf.benchmark", "gpu", "--device", "cpu", "--quick",
                           "--variants", "float32,mixed_bfloat16+xla", "--output", str(tmp_path)],
                          capture_output=True, text=True, timeout=1200, env=fresh_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    environment = report["environment"]
    assert environment["device_kind"] == "CPU" and environment["replica_devices"] == ["/CPU:1", "/CPU:2"]
    assert [r["key"] for r in report["rows"]] == ["gcl_mlp_step", "gcl_convnet_step", "gcl_eval_30", "er_step"]
    for row in report["rows"]:
        assert set(row["ms"]) == {"float32", "bfloat16 + XLA"} and all(v > 0 for v in row["ms"].values())
        assert row["ratio_to_float32"]["float32"] == 1.0
        assert all(t in (None, 1) for t in row["traces"].values())  # no retracing
    for where in ("placement", "end_to_end"):
        r = report[where]
        assert r["misplaced"] == [] and r["variable_contents_to_host"] == [] and r["traces"] == 1
        assert r["random_ops_on_device"] >= 1 and r["random_ops_on_host"] == []
        assert "memory/images:0" in r["memory_variables"]
    assert report["placement"]["cache_variables"]  # the evaluation caches were checked too
    e2e = report["end_to_end"]
    # auto on CPU with 2 replicas: no XLA
    assert e2e["replicas"] == 2 and e2e["train_steps"] == 10 and e2e["run_jit_compile"] is False
    assert report["failures"] == []
    assert report["verdict"]["supported"] is None  # no float32 + XLA pair measured
    anchor = report["anchor"]
    assert bool(anchor["runs"]) == (importlib.util.find_spec("torch") is not None)  # the anchor runs where torch is
    if anchor["runs"]:
        run = anchor["runs"]["gcl_mlp_step/eager"]
        assert run["ms"] > 0 and set(run["ratios"]) == {"float32", "bfloat16 + XLA"}
    else:
        assert anchor["note"].startswith("PyTorch anchor skipped")
    text = (tmp_path / "gpu_check.md").read_text()
    assert "| GCL step, MLP, memory 20 |" in text and "All placement assertions hold." in text
    assert (tmp_path / "end_to_end" / "run" / "results.json").exists()


def test_the_verdict_reads_the_xla_rows():
    from gcl_tf.benchmark.gpu_report import verdict

    def rows(xla_ms):
        return [{"what": f"GCL step {i}", "ms": {"float32": 10.0, "float32 + XLA": ms}} for i, ms in enumerate(xla_ms)]

    on = verdict(rows([5.0, 6.0]), "GPU")
    assert on["supported"] is True and on["agrees"] is True and "confirms" in on["text"]
    off = verdict(rows([15.0, 12.0]), "GPU")
    assert off["supported"] is False and "overturns" in off["text"]
    assert "JIT_COMPILE_BY_DEVICE['GPU'] = False" in off["text"]
    assert verdict(rows([15.0, 12.0]), "CPU")["agrees"] is True
    # the evaluation is compiled with the same setting: XLA must not lose there either
    slow_evaluation = rows([5.0, 6.0]) + [{"what": "GCL evaluation", "ms": {"float32": 1.0, "float32 + XLA": 3.0}}]
    both = verdict(slow_evaluation, "GPU")
    assert both["supported"] is False and "slower on the evaluation" in both["text"]


def _section_results(misplaced=()):
    """What the check's sections give on CPU devices (quick, two variants), as they gave it."""
    variants = {"float32": 1.0, "bfloat16 + XLA": 1.4}
    rows = [{"key": key, "what": what, "unit": unit, "ms": {v: 2.0 * r for v, r in variants.items()},
             "ratio_to_float32": dict(variants), "traces": {v: 1 for v in variants}, "anchor": None}
            for key, what, unit in [("gcl_mlp_step", "GCL step, MLP, memory 20", "ms/step"),
                                    ("gcl_convnet_step", "GCL step, ConvNet, memory 10", "ms/step"),
                                    ("gcl_eval_30", "GCL evaluation, 30 graph samples, memory 20", "ms/image"),
                                    ("er_step", "ER step, memory 20", "ms/step")]]
    placed = {"functions": 1, "nodes": 1000, "device_to_host_sends": [], "variable_contents_to_host": [],
              "random_ops_on_device": 2, "random_ops_on_host": [], "xla_computations_on_device": 0, "traces": 1,
              "variables": 58, "memory_variables": ["memory/images:0", "memory/edge_logits:0"],
              "cache_variables": ["test_noise:0"], "misplaced": list(misplaced), "jit_compile": False,
              "auto_jit_compile": False}
    mirrored = {**placed, "cache_variables": [], "misplaced": [], "replicas": 2, "acc": 18.0, "train_steps": 10,
                "train_seconds": 4.0, "eval_seconds": 2.0, "seconds": 6.0, "run_jit_compile": False,
                "batch_size": 10, "memory": 20, "backbone": "mlp"}
    anchor = {"note": "PyTorch anchor skipped: torch is not importable here (pip install torch to compare)",
              "runs": {}}
    return rows, anchor, placed, mirrored


@pytest.mark.parametrize("misplaced", [(), ("dense/kernel:0 on /CPU:0",)])
def test_the_check_writes_its_tables_json_and_verdict_and_fails_on_a_broken_assertion(tmp_path, monkeypatch,
                                                                                        capsys, misplaced):
    """The fast form of test_the_whole_check_runs_on_cpu_devices_and_writes_its_report: the command
    itself (gpu.main) with its sections' results as they come on CPU devices: the JSON and Markdown
    reports, the rows' table, the verdict and the exit status; a variable off its device is a
    failure the report names, exit status 1. (The sections' own work on the devices is the long
    form's, and the placement analysis's: the slow tests above.)"""
    from gcl_tf.benchmark.gpu_devices import Devices
    from gcl_tf.speed.gcl import gpu

    rows, anchor, placed, mirrored = _section_results(misplaced)
    monkeypatch.setattr(gpu, "setup_devices", lambda kind: Devices("CPU", "/CPU:1", ["/CPU:1", "/CPU:2"]))
    monkeypatch.setattr(gpu, "speed_section", lambda devices, variants, repeats, quick, log: rows)
    monkeypatch.setattr(gpu, "anchor_section", lambda devices, rows, quick, log: anchor)
    monkeypatch.setattr(gpu, "placement_single", lambda devices, quick, log: placed)
    monkeypatch.setattr(gpu, "end_to_end", lambda devices, quick, folder, log: mirrored)
    code = gpu.main(["--device", "cpu", "--quick", "--variants", "float32,mixed_bfloat16+xla",
                     "--output", str(tmp_path)])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["environment"]["device_kind"] == "CPU" and report["environment"]["replica_devices"] == [
        "/CPU:1", "/CPU:2"]
    assert [r["key"] for r in report["rows"]] == ["gcl_mlp_step", "gcl_convnet_step", "gcl_eval_30", "er_step"]
    assert report["verdict"]["supported"] is None  # no float32 + XLA pair measured
    text = (tmp_path / "gpu_check.md").read_text()
    assert "| GCL step, MLP, memory 20 |" in text and "PyTorch anchor skipped" in text
    if not misplaced:
        assert code == 0 and report["failures"] == [] and "All placement assertions hold." in text
    else:
        assert code == 1 and report["failures"] == ["single device: 1 variables off the device (first: "
                                                    "dense/kernel:0 on /CPU:0)"]
        assert capsys.readouterr().err.startswith("error: GPU check failed: single device: 1 variables off")
