"""The notebooks execute (so they cannot rot): quickstart on a short digits stream, results on
the tiny suite of tests/tiny_suite.py.

Parameters are injected as papermill does: a cell after the one tagged ``parameters``. The
kernel is this interpreter (a kernel spec written to a temporary JUPYTER_PATH), so no
``ipykernel install`` is needed and the notebooks import the gcl_tf under test.
"""
from __future__ import annotations

import json
import os
import re
import sys

import pytest

from conftest import REPO
from tiny_suite import copy_suite

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = os.path.join(REPO, "notebooks")


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A 'python3' kernel spec running this interpreter, found first on JUPYTER_PATH."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        # As a user's kernel: ipykernel forwards what C++ code writes to fd 2 into the notebook,
        # except under pytest (PYTEST_CURRENT_TEST, which the kernel would inherit).
        "argv": [sys.executable, "-c", "import os; os.environ.pop('PYTEST_CURRENT_TEST', None); "
                 "from ipykernel import kernelapp; kernelapp.launch_new_instance()", "-f", "{connection_file}"],
        "display_name": "Python 3 (tests)", "language": "python",
    }))
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # as a user's Jupyter: the notebook sets it
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "python3"


def execute(name: str, parameters: dict, kernel_name: str):
    notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    index = next(i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", []))
    source = "\n".join(f"{key} = {value!r}" for key, value in parameters.items())
    injected = nbformat.v4.new_code_cell(source)
    injected.metadata["tags"] = ["injected-parameters"]
    notebook.cells.insert(index + 1, injected)
    client = nbclient.NotebookClient(notebook, kernel_name=kernel_name, timeout=600,
                                     resources={"metadata": {"path": NOTEBOOKS}})
    client.execute()
    return notebook


def outputs(notebook):
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            yield output


def texts(notebook) -> str:
    parts = []
    for output in outputs(notebook):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/markdown", ""))
    return "\n".join(parts)


def images(notebook) -> int:
    return sum("image/png" in output.get("data", {}) for output in outputs(notebook))


# TensorFlow's start-up lines: absl's "I0000 00:00:... port.cc:153] oneDNN ...", its notice about
# InitializeLog, the CUDA probe, the CPU-feature notice.
TF_LOG = re.compile(r"^[IWE]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|absl::InitializeLog|cpu_feature_guard|rebuild TensorFlow",
                    re.MULTILINE)


def assert_no_tensorflow_log(notebook) -> None:
    streams = "".join(output.get("text", "") for output in outputs(notebook) if output.get("output_type") == "stream")
    assert not TF_LOG.search(streams), streams[:2000]


def test_committed_notebooks_carry_no_outputs():
    """Saved outputs go stale and carry machine-specific log lines: the notebooks are committed clean."""
    for name in ("quickstart.ipynb", "results.ipynb"):
        notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (name, cell.source[:80])


@pytest.mark.slow
def test_quickstart_notebook_trains_gcl_and_shows_matrix_and_graph(tmp_path, kernel):
    out = tmp_path / "quickstart"
    notebook = execute("quickstart.ipynb", {
        "OVERRIDES": ["benchmark.num_tasks=2", "benchmark.samples_per_task=100",
                      "benchmark.test_samples_per_task=50", "method.memory_size=30", "method.test_graph_samples=3"],
        "OUTPUT": str(out),
    }, kernel)
    text = texts(notebook)
    assert images(notebook) == 1  # the context graph
    assert_no_tensorflow_log(notebook)
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == "gcl" and len(results["accuracy_matrix"]) == 2
    # what the notebook shows is the run it trained: its matrix and summaries, as results.json has them
    rows = [f"| {i + 1} | " + " | ".join(f"{v:.1f}" for v in row) + " |"
            for i, row in enumerate(results["accuracy_matrix"])]
    assert "| after task | task 1 | task 2 |" in text and all(row in text for row in rows), text
    assert f"ACC {results['acc']:.2f}   FGT {results['fgt']:.2f}   BWT {results['bwt']:.2f}" in text


@pytest.mark.slow
def test_results_notebook_redraws_every_figure_of_a_suite(tmp_path, kernel):
    _, suite = copy_suite(tmp_path)
    for name in os.listdir(os.path.join(suite, "figures")):
        os.remove(os.path.join(suite, "figures", name))
    notebook = execute("results.ipynb", {"RESULTS_DIR": suite}, kernel)
    figures = sorted(os.listdir(os.path.join(suite, "figures")))
    assert len(figures) == 6
    assert images(notebook) == len(figures)
    text = texts(notebook)
    assert "16 finished runs" in text and "Ablation study" in text and "Memory size" in text
    assert_no_tensorflow_log(notebook)


@pytest.mark.slow
def test_results_notebook_opens_the_shipped_suite_on_a_fresh_clone(kernel):
    """With its default parameters the notebook shows docs/results/fashion (tables and figures, no
    saved runs) and writes nothing there."""
    shipped = os.path.join(REPO, "docs", "results", "fashion")

    def snapshot():
        return {os.path.relpath(os.path.join(root, name), shipped): open(os.path.join(root, name), "rb").read()
                for root, _, names in os.walk(shipped) for name in names}

    before = snapshot()
    notebook = execute("results.ipynb", {}, kernel)
    assert snapshot() == before
    assert images(notebook) == len(os.listdir(os.path.join(shipped, "figures"))) == 10
    text = texts(notebook)
    assert "0 finished runs" in text and "Ablation study" in text and "Memory size" in text
    assert_no_tensorflow_log(notebook)
