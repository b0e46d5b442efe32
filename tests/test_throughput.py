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
