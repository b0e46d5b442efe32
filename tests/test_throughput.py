"""The throughput benchmark runs end to end (quick mode) and reports every section."""
import importlib.util
import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_throughput_quick_writes_every_section(tmp_path):
    command = [sys.executable, "-m", "gcl_tf.benchmark", "throughput", "--quick", "--output", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "throughput.json").read_text())
    assert report["matmul_gflops"] > 0
    assert [r["traces"] for r in report["gcl_steps"]] == [1, 1, 1, 1]  # no retracing
    assert "GEMMs alone" in report["gcl_steps"][1]["what"]  # the MLP step's ceiling
    assert all(r["ms"] > 0 and r["gflop"] > 0 and r["matmul_gflops"] > 0 for r in report["gcl_steps"])
    assert report["matmul_gflops_range"][0] <= report["matmul_gflops"] <= report["matmul_gflops_range"][1]
    assert report["eval_ratio"] > 1.0 and report["eval_flop_ratio"] > 1.0  # 30 graph samples cost more than one
    assert len(report["gcl_eval"]) == 4  # 1 sample, 30; 30 without the context cache, without either cache
    assert len(report["keras_overhead"]) == 4 and len(report["input_pipeline"]) == 2
    assert all(0.0 <= r["input_wait_fraction"] <= 1.0 for r in report["input_pipeline"])
    sweep = report["memory_sweep"]
    assert {r["memory"] for r in sweep} == {50, 100} and all(r["traces"] == 1 for r in sweep)
    assert (tmp_path / "memory_sweep.png").stat().st_size > 1000
    assert "GFLOP/s" in (tmp_path / "throughput.md").read_text()
    against = report["against_torch"]  # PyTorch's step in turns with ours, when torch is importable
    assert bool(against["rows"]) == (importlib.util.find_spec("torch") is not None)
    if against["rows"]:
        (row,) = against["rows"]
        assert set(row["ms"]) == {"gcl_tf, oneDNN off", "gcl_tf, oneDNN on", "PyTorch eager"}
        assert all(value > 0 for value in row["ratio_to_torch"].values())
        assert "/ PyTorch" in (tmp_path / "throughput.md").read_text()
    else:
        assert "torch is not importable" in against["note"]


def test_throughput_writes_every_section_of_its_report(tmp_path, monkeypatch, capsys):
    """The fast form of test_throughput_quick_writes_every_section: the command itself
    (throughput.main) with every section's rows as the sections give them: the JSON holds every
    section, the Markdown a table of each, the memory sweep its plot. (The sections' own timings
    are the long form's; steps and eval also run for real in the test below.)"""
    from gcl_tf.speed.gcl import throughput

    class Reference:
        rates = [90.0, 100.0, 110.0]

        def __call__(self):
            return 100.0

    step = {"ms": 2.0, "gflops": 5.0, "matmul_gflops": 100.0, "fraction_of_matmul": 0.05, "traces": 1,
            "images_per_s": 5000.0, "gflop": 0.01}
    monkeypatch.setattr(throughput, "MatmulReference", lambda repeats: Reference())
    monkeypatch.setattr(throughput, "gcl_step_section", lambda reference, repeats, quick: [
        {"what": "GCL step, MLP, memory 200", **step}, {"what": "the same step's 9 GEMMs alone (its ceiling)", **step},
        {"what": "GCL step, MLP, memory 200, XLA (jit_compile)", **step}, {"what": "GCL step, ConvNet", **step}])
    monkeypatch.setattr(throughput, "gcl_eval_section", lambda reference, repeats, quick: (
        [{"what": f"eval {k}", "samples": 30, "ms_per_image": 0.1 * (k + 1), "gflops": 1.0, "matmul_gflops": 100.0,
          "fraction_of_matmul": 0.01} for k in range(4)], 3.0, 4.0))
    monkeypatch.setattr(throughput, "keras_overhead_section", lambda repeats, quick: [
        {"what": f"{m}, steps_per_execution {k}", "ms_per_step": 1.0} for m in ("er", "finetune") for k in (1, 20)])
    monkeypatch.setattr(throughput, "input_pipeline_section", lambda repeats, quick: [
        {"what": f"{m} (100 steps)", "ms_per_step": 1.0, "input_wait_fraction": 0.1} for m in ("gcl", "er")])
    monkeypatch.setattr(throughput, "memory_sweep_section", lambda reference, repeats, quick, sizes: [
        {"memory": m, "variant": v, "ms": 1.0 + m / 100, "gflops": 1.0, "matmul_gflops": 100.0,
         "fraction_of_matmul": 0.01, "traces": 1} for m in sizes for v in ("matrix", "embeddings")])
    monkeypatch.setattr(throughput.against_torch, "section", lambda rounds, log, **quick: {
        "rows": [], "note": "torch is not importable here"})
    assert throughput.main(["--quick", "--output", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "throughput.json").read_text())
    assert {"gcl_steps", "gcl_eval", "keras_overhead", "input_pipeline", "memory_sweep", "against_torch"} <= set(report)
    assert report["matmul_gflops"] == 100.0 and report["matmul_gflops_range"] == [90.0, 110.0]
    assert {r["memory"] for r in report["memory_sweep"]} == {50, 100}  # --quick: the two-point sweep
    text = (tmp_path / "throughput.md").read_text()
    assert "GFLOP/s" in text and "GCL step, ConvNet" in text and "finetune, steps_per_execution 20" in text
    assert "gcl (100 steps)" in text and "its GEMMs alone" in text and "30 graph samples cost **3.00x**" in text
    assert (tmp_path / "memory_sweep.png").stat().st_size > 1000


def test_throughput_runs_only_the_sections_asked_for_and_names_the_allowed_ones(tmp_path, monkeypatch):
    """``--sections steps,eval`` runs those two sections and no other (the command's main, every
    section replaced by a recorder: the sections themselves run for real in the quick test above);
    an unknown section is one line and exit 2, before TensorFlow loads."""
    from gcl_tf.speed.gcl import throughput

    ran = []

    def recorder(name, rows):
        return lambda *args, **kwargs: ran.append(name) or rows

    monkeypatch.setattr(throughput, "MatmulReference", lambda repeats: type(
        "Reference", (), {"rates": [100.0], "__call__": lambda self: 100.0})())
    monkeypatch.setattr(throughput, "gcl_step_section", recorder("steps", [
        {"what": "GCL step", "ms": 2.0, "gflops": 5.0, "matmul_gflops": 100.0, "fraction_of_matmul": 0.05,
         "traces": 1, "images_per_s": 5000.0, "gflop": 0.01}]))
    monkeypatch.setattr(throughput, "gcl_eval_section", recorder("eval", ([], 3.0, 4.0)))
    for attribute, name in (("keras_overhead_section", "keras"), ("input_pipeline_section", "input"),
                            ("memory_sweep_section", "sweep")):
        monkeypatch.setattr(throughput, attribute, recorder(name, []))
    monkeypatch.setattr(throughput.against_torch, "section", recorder("torch", {"rows": [], "note": ""}))
    assert throughput.main(["--quick", "--sections", "steps,eval", "--output", str(tmp_path)]) == 0
    assert ran == ["steps", "eval"]
    report = json.loads((tmp_path / "throughput.json").read_text())
    assert {"gcl_steps", "gcl_eval"} <= set(report) and not {"memory_sweep", "against_torch"} & set(report)
    proc = subprocess.run([sys.executable, "-m", "gcl_tf.benchmark", "throughput", "--quick", "--sections",
                           "steps,speed", "--output", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --sections: speed unknown; allowed: steps,eval,keras,input,sweep,torch"]


def test_against_torch_reports_each_rounds_ratio_and_the_cpu():
    from gcl_tf.speed.gcl import against_torch

    times = {"gcl_tf, oneDNN off": [10.0, 12.0, 9.0], "gcl_tf, oneDNN on": [6.0, 7.0, 5.0],
             "PyTorch eager": [10.0, 10.0, 10.0]}
    row = against_torch.summarize("cifar", times)
    assert row["ms"]["gcl_tf, oneDNN on"] == 6.0 and row["ms"]["PyTorch eager"] == 10.0
    assert row["ratio_to_torch"] == {"gcl_tf, oneDNN off": 1.0, "gcl_tf, oneDNN on": 0.6}
    assert row["ratio_range"]["gcl_tf, oneDNN on"] == [0.5, 0.7]
    text = "\n".join(against_torch.markdown({"torch": {"version": "2.x"}, "cpu": {"model": "AMD EPYC",
                                                                                    "vector_flags": ["avx", "avx2"]},
                                             "rows": [row], "note": ""}))
    assert "| GCL step, convnet, memory 250 | 10.0 | 6.0 | 10.0 | 1.00x (0.90-1.20) | 0.60x (0.50-0.70) |" in text
    assert "AMD EPYC, avx avx2" in text


def test_step_gemms_are_the_analytic_flops():
    """The GEMM list the ceiling is timed on has the step's analytic FLOPs (MLP trunk); a
    ConvNet trunk has none (its convolutions are not GEMMs)."""
    from gcl_tf.speed.gcl import throughput

    model = throughput.make_model("gcl", (28, 28, 1), memory=100)
    gemms = throughput.gcl_step_gemms(model, 10)
    flops = sum(2.0 * m * k * n for m, k, n, *_ in gemms)
    assert abs(flops / throughput.gcl_step_flops(model, 10) - 1.0) < 0.01
    assert throughput.time_gemms(gemms[:3], repeats=2) > 0
    conv = throughput.make_model("gcl", (32, 32, 3), memory=20, backbone="convnet")
    assert throughput.gcl_step_gemms(conv, 10) is None
