"""The package's shape, kept so by this test (it runs with the fast loop and in CI): small files and
functions, generic layers that know no method, one place for each thing, no import cycle."""
from __future__ import annotations

import ast
import fnmatch
import pathlib

import pytest

from gcl_tf import methods

ROOT = pathlib.Path(__file__).resolve().parents[1] / "gcl_tf"
MAX_FILE_LINES = 400
MAX_TEST_FILE_LINES = 600  # a test file a reader can hold: split by behaviour, shared harnesses beside
MAX_FUNCTION_LINES = 60
# A documentation page (docs/**/*.md) is read whole: one study, one topic a page; the generated
# tables and suite indexes under docs/results/ are not pages and are not counted. No exception.
DOCS = ROOT.parent / "docs"
MAX_DOC_LINES = 300
# Who may name a registered method: the methods themselves (gcl_tf/methods/); each method's own
# speed checks, a room of their own above the benchmark's machinery (GCL's step timed against its
# PyTorch anchor and its analytic FLOPs, with GCL's keys: gcl_tf/speed/gcl/, run by
# python -m gcl_tf.benchmark throughput|gpu, found by the lead method's name); and the published
# numbers, data about the papers keyed by the registry's names (benchmark/published.py).
# Which method takes which part in the paper's suite (the lead, the memory study's pair, the t-SNE
# panels, the ablation) is data: gcl_tf/benchmark/paper_suite.yaml, read by benchmark/roles.py.
NAMES_METHODS = ("gcl_tf.methods", "gcl_tf.speed", "gcl_tf.benchmark.published")


def names_methods(module: str) -> bool:
    return any(module == allowed or module.startswith(allowed + ".") for allowed in NAMES_METHODS)


def sources():
    """``{module name: (path, tree)}`` of every module of the package."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return out


def test_no_file_and_no_function_is_too_long():
    long_files, long_functions = [], []
    for name, (path, tree) in sources().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_FILE_LINES:
            long_files.append(f"{name}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name}: {length} lines")
    assert not long_files, f"over {MAX_FILE_LINES} lines: {long_files}"
    assert not long_functions, f"over {MAX_FUNCTION_LINES} lines: {long_functions}"


def test_no_test_file_is_too_long():
    long_files = [f"{path.name}: {lines} lines" for path in sorted((ROOT.parent / "tests").glob("*.py"))
                  if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_TEST_FILE_LINES]
    assert not long_files, f"over {MAX_TEST_FILE_LINES} lines: {long_files}"


def long_pages(docs=DOCS, limit=MAX_DOC_LINES) -> list[str]:
    """The pages of ``docs`` (its Markdown files, docs/results/ left out) over ``limit`` lines."""
    pages = [path for path in sorted(docs.rglob("*.md")) if "results" not in path.relative_to(docs).parts[:1]]
    lengths = {path.relative_to(docs.parent).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path in pages}
    return [f"{name}: {lines} lines" for name, lines in lengths.items() if lines > limit]


def test_no_docs_page_is_too_long(tmp_path):
    assert not long_pages(), f"over {MAX_DOC_LINES} lines (split the page): {long_pages()}"
    # the check itself: a long page anywhere under docs/ counts, a generated table under docs/results/ does not
    (tmp_path / "docs" / "study").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "suite").mkdir(parents=True)
    (tmp_path / "docs" / "study" / "long.md").write_text("line\n" * 301)
    (tmp_path / "docs" / "results" / "suite" / "README.md").write_text("| row |\n" * 1000)
    (tmp_path / "docs" / "short.md").write_text("line\n" * 300)
    assert long_pages(tmp_path / "docs") == ["docs/study/long.md: 301 lines"]


def test_the_generic_layers_name_no_method_and_probe_no_model():
    """Outside gcl_tf/methods (and NAMES_METHODS) no module names a registered method or asks a
    model, a method class or a method's config what it has (hasattr, getattr with a default):
    what the library reads from a method is a hook with a default (methods/hooks.py)."""
    names = set(methods.REGISTRY)
    probed = {"model", "self.model", "cls", "config.method", "method", "learner"}
    found = []
    for name, (path, tree) in sources().items():
        if names_methods(name):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{name}:{node.lineno} names {node.value!r}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
                    and (node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3))
                    and ast.unparse(node.args[0]) in probed):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def test_every_file_of_the_package_is_package_data():
    """Each file under gcl_tf/ besides its modules (py.typed, data files) is listed in
    pyproject's package-data, so that an install holds it; the package is typed (PEP 561)."""
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT.parent / "pyproject.toml", "rb") as handle:
        listed = tomllib.load(handle)["tool"]["setuptools"]["package-data"]

    def shipped(path: pathlib.Path) -> bool:  # setuptools' rule: a package's patterns, relative to it
        package = ".".join(path.parent.relative_to(ROOT.parent).parts)
        return any(fnmatch.fnmatch(path.name, p) for key in (package, "*") for p in listed.get(key, []))

    files = [path for path in ROOT.rglob("*") if path.is_file() and "__pycache__" not in path.parts
             and path.suffix not in (".py", ".pyc")]
    assert (ROOT / "py.typed").is_file()
    missing = [str(path.relative_to(ROOT.parent)) for path in files if not shipped(path)]
    assert not missing, f"not in pyproject's [tool.setuptools.package-data]: {missing}"


def imports(tree, module: str, modules: dict, is_package: bool) -> set:
    """The package's modules ``tree`` imports, at its top or inside a function (``from a import b``
    counts ``a.b`` when that is a module, else ``a``), or by name (``importlib.import_module``)."""
    from helpers import dynamic_imports

    found = set()
    for target, _ in dynamic_imports(tree):
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != module:
            found.add(target)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def test_no_import_cycle_not_even_inside_functions():
    """The modules import downwards only: no cycle, counting the imports inside functions (the
    registry, gcl_tf/methods/__init__.py, no longer imports the base class that imports it)."""
    modules = sources()
    graph = {name: imports(tree, name, modules, path.name == "__init__.py") for name, (path, tree) in modules.items()}
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles, [" -> ".join(cycle) for cycle in cycles]
    assert "gcl_tf.methods.base" not in graph["gcl_tf.methods"]
