"""The throughput benchmark runs end to end (quick mode) and reports every section."""
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
    if against["rows"]:
        (row,) = against["rows"]
        assert set(row["ms"]) == {"gcl_tf, oneDNN off", "gcl_tf, oneDNN on", "PyTorch eager"}
        assert all(value > 0 for value in row["ratio_to_torch"].values())
        assert "/ PyTorch" in (tmp_path / "throughput.md").read_text()
    else:
        assert "torch is not importable" in against["note"]


def test_throughput_runs_only_the_sections_asked_for_and_names_the_allowed_ones(tmp_path):
    command = [sys.executable, "-m", "gcl_tf.benchmark", "throughput", "--quick", "--sections", "steps,eval"]
    proc = subprocess.run(command + ["--output", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "throughput.json").read_text())
    assert {"gcl_steps", "gcl_eval"} <= set(report) and not {"memory_sweep", "against_torch"} & set(report)
    proc = subprocess.run(command[:-1] + ["steps,speed"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --sections: speed unknown; allowed: steps,eval,keras,input,sweep,torch"]


def test_against_torch_reports_each_rounds_ratio_and_the_cpu():
    from gcl_tf.benchmark import against_torch

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
    from gcl_tf.benchmark import throughput

    model = throughput.make_model("gcl", (28, 28, 1), memory=100)
    gemms = throughput.gcl_step_gemms(model, 10)
    flops = sum(2.0 * m * k * n for m, k, n, *_ in gemms)
    assert abs(flops / throughput.gcl_step_flops(model, 10) - 1.0) < 0.01
    assert throughput.time_gemms(gemms[:3], repeats=2) > 0
    conv = throughput.make_model("gcl", (32, 32, 3), memory=20, backbone="convnet")
    assert throughput.gcl_step_gemms(conv, 10) is None
