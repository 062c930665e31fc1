"""The folder layout is the architecture: imports only go down, nothing imports in a circle, MAG240M
stays in its folder, test tooling stays out of the library, and non-molecular data never loads RDKit;
the test tree mirrors the package, and no test imports another."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from graphormer_urpe.testing.tu_format import TUGraph, write_tu_dataset
from graphormer_urpe.testing.zinc_raw import write_zinc_raw

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "graphormer_urpe"
TESTS = REPO / "tests"

#: Floor of each top-level part of the package; a module may import only from its own floor or lower.
LAYERS = {
    "constants": 0,
    "errors": 0,
    "configs": 0,
    "pretrained": 0,
    "data": 1,
    "model": 2,
    "tasks": 3,
    "run": 4,
    "evaluation": 5,
    "convert": 6,
    "commands": 7,
    "testing": 8,
}


def imports(source: str, module: str) -> list[str]:
    """Every ``graphormer_urpe...`` module that ``source`` (the text of ``module``) imports, wherever the
    import is: at module level, under ``if TYPE_CHECKING:``, inside functions. ``from package import
    name`` counts as an import of ``package.name`` when that is a module; relative imports are resolved."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x, from ..data import y
                parent = module.split(".")[: -node.level]
                base = ".".join([*parent, base] if base else parent)
            if base.startswith("graphormer_urpe"):
                names += [f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names if a.name.startswith("graphormer_urpe")]
    return names


def is_module(name: str) -> bool:
    """Whether the dotted ``name`` is a module or package of the library."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def part(module: str) -> str:
    """``graphormer_urpe.data.cache`` -> ``data``; the package root itself -> ``""``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else ""


def library_files() -> list[tuple[str, Path]]:
    modules = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return modules


def import_graph(group: Callable[[str], str | None]) -> dict[str, set[str]]:
    """Which group imports which (``group`` maps a module to its group, None to leave it out)."""
    edges: dict[str, set[str]] = {}
    for module, path in library_files():
        source = group(module)
        if source is None:
            continue
        edges.setdefault(source, set())
        for target in map(group, imports(path.read_text(), module)):
            if target is not None and target != source:
                edges[source].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_imports_are_found_wherever_they_are() -> None:
    source = textwrap.dedent("""
        from __future__ import annotations
        from typing import TYPE_CHECKING
        from graphormer_urpe.data import cache
        from . import batch
        if TYPE_CHECKING:
            from graphormer_urpe.model.graphormer import GraphormerConfig
        def late():
            import graphormer_urpe.tasks.base
            from ..run.cli import log
    """)
    assert imports(source, "graphormer_urpe.data.example") == [
        "graphormer_urpe.data.cache",
        "graphormer_urpe.data.batch",
        "graphormer_urpe.model.graphormer",
        "graphormer_urpe.tasks.base",
        "graphormer_urpe.run.cli",
    ]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_only_go_down_the_layers() -> None:
    upward = []
    for module, path in library_files():
        if part(module) not in LAYERS:  # the package's __init__: the public API, above everything
            continue
        for target in imports(path.read_text(), module):
            if part(target) in LAYERS and LAYERS[part(target)] > LAYERS[part(module)]:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_no_modules_import_each_other() -> None:
    assert cycles(import_graph(lambda module: module)) == []


def test_no_parts_of_the_package_import_each_other() -> None:
    assert cycles(import_graph(lambda module: part(module) or None)) == []


def test_no_parts_of_the_data_package_import_each_other() -> None:
    def data_part(module: str) -> str | None:  # graphormer_urpe.data.sources.tables -> sources
        pieces = module.split(".")
        return pieces[2] if len(pieces) > 2 and pieces[1] == "data" else None

    assert cycles(import_graph(data_part)) == []


def test_model_depends_on_its_input_contract_alone() -> None:
    for module, path in library_files():
        if part(module) == "model":
            allowed = (
                "graphormer_urpe.model",
                "graphormer_urpe.constants",
                "graphormer_urpe.errors",
                "graphormer_urpe.data.batch",
                "graphormer_urpe.data.pyg_interop",
                "graphormer_urpe.data.spec",
            )  # our batch, or a PyG one
            outside = [t for t in imports(path.read_text(), module) if not t.startswith(allowed)]
            assert outside == [], module


def test_core_data_pipeline_never_imports_mag240m_or_synthetic_code() -> None:
    leaks = []
    for module, path in library_files():
        if module.startswith("graphormer_urpe.data.") and not module.startswith(
            ("graphormer_urpe.data.mag240m", "graphormer_urpe.data.synthetic")
        ):
            leaks += [
                f"{module} -> {t}"
                for t in imports(path.read_text(), module)
                if t.startswith(("graphormer_urpe.data.mag240m", "graphormer_urpe.data.synthetic"))
            ]
    assert leaks == []


def test_the_errors_module_is_the_ground_floor() -> None:
    assert imports((PACKAGE / "errors.py").read_text(), "graphormer_urpe.errors") == []


def test_test_tooling_stays_out_of_the_library() -> None:
    leaks = [
        f"{module} -> {t}"
        for module, path in library_files()
        if part(module) != "testing"
        for t in imports(path.read_text(), module)
        if part(t) == "testing"
    ]
    assert leaks == []


#: The scripts at the repository root (``train.py``, ``evaluate.py``, ``seeds.py``): the commands' shims in a checkout.
ROOT_SCRIPTS = sorted(path.stem for path in REPO.glob("*.py"))


def absolute_imports(source: str) -> list[str]:
    """The top-level name of every absolute import in ``source`` (``import train`` and ``from train import x``)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level:
            names.append((node.module or "").split(".")[0])
        elif isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
    return names


def checkout_assumptions(module: str, source: str) -> list[str]:
    """Why ``module`` would only run from a checkout: it imports a root script, or names ``REPO_DIR`` outside
    ``testing/``; an installed wheel has neither."""
    found = [f"{module} imports the root script {name}.py" for name in absolute_imports(source) if name in ROOT_SCRIPTS]
    if part(module) != "testing" and any(
        isinstance(node, ast.Name | ast.alias) and "REPO_DIR" in (node.id if isinstance(node, ast.Name) else node.name)
        for node in ast.walk(ast.parse(source))
    ):
        found.append(f"{module} names REPO_DIR (the checkout) outside testing/")
    return found


def test_the_library_runs_installed_assuming_no_checkout() -> None:
    assert ROOT_SCRIPTS == ["evaluate", "seeds", "train"]
    assert checkout_assumptions("graphormer_urpe.run.x", "import train\nfrom seeds import main\nx = REPO_DIR") == [
        "graphormer_urpe.run.x imports the root script train.py",
        "graphormer_urpe.run.x imports the root script seeds.py",
        "graphormer_urpe.run.x names REPO_DIR (the checkout) outside testing/",
    ]
    assert checkout_assumptions("graphormer_urpe.testing.x", "from graphormer_urpe.testing import REPO_DIR") == []
    assert [
        reason for module, path in library_files() for reason in checkout_assumptions(module, path.read_text())
    ] == []


@pytest.mark.slow
def test_non_molecular_sources_do_not_load_rdkit() -> None:
    code = (
        "import sys\n"
        "import graphormer_urpe, graphormer_urpe.data.sources.zinc, graphormer_urpe.data.sources.pyg\n"
        "import graphormer_urpe.data.datamodule, graphormer_urpe.data.cache\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rdkit', 'ogb')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


#: Builds a ZINC and a PyG cache with two preprocessing workers in a fresh process; every process that reads
#: rows writes which RDKit and ogb modules it has loaded by then.
BUILD_WITHOUT_RDKIT = """
import json, os, sys
from pathlib import Path
from graphormer_urpe.data.datamodule import GraphDataModule
from graphormer_urpe.data.sources.pyg import PygDataset, PygReader
from graphormer_urpe.data.sources.zinc import ZINC, ZINCReader

root, out = Path(sys.argv[1]), Path(sys.argv[2])
for reader in (ZINCReader, PygReader):
    read = reader.graphs
    def graphs(self, start, stop, max_nodes=None, read=read, name=reader.__name__):
        yield from read(self, start, stop, max_nodes)
        loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('rdkit', 'ogb'))
        (out / f"{name}-{os.getpid()}.json").write_text(json.dumps(loaded))
    reader.graphs = graphs
tu = PygDataset("torch_geometric.datasets.TUDataset", args={"root": str(root / "tu"), "name": "TOY"})
for source in (ZINC(subset=False), tu):
    GraphDataModule(source, root=str(root), preprocess_workers=2, chunk_size=8, num_workers=0).prepare_data()
print(os.getpid(), json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('rdkit', 'ogb'))))
"""


@pytest.mark.slow
def test_building_a_non_molecular_cache_loads_no_rdkit_in_any_process(tmp_path: Path) -> None:
    """The cache's workers set themselves up through their reader (``RowReader.worker_init``): only a
    molecule reader silences RDKit, so ZINC and PyG caches never import it, in the workers either."""
    write_zinc_raw(tmp_path / "ZINC" / "raw", {"train": 20, "val": 8, "test": 6}, {"train": 4, "val": 2, "test": 2})
    edges = np.array([[0, 1, 1, 2], [1, 0, 2, 1]])
    graphs = [
        TUGraph(num_nodes=3, edge_index=edges, node_labels=np.array([1, 2, k % 3]), graph_label=k % 2)
        for k in range(20)
    ]
    write_tu_dataset(tmp_path / "tu" / "TOY" / "raw", "TOY", graphs)
    out = tmp_path / "loaded"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", BUILD_WITHOUT_RDKIT, str(tmp_path), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parent, loaded_here = done.stdout.split()
    reports = {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}
    workers = {name.split("-")[0] for name in reports if name.split("-")[1] != parent}
    assert workers == {"ZINCReader", "PygReader"}  # rows were read in worker processes, for both caches
    assert json.loads(loaded_here) == [] and all(loaded == [] for loaded in reports.values()), reports


# ----------------------------------------------------------------------------- the test tree mirrors the package


def mirrored_folder(test_folder: Path) -> Path:
    """The folder whose code the tests in ``test_folder`` test: ``tests/<p>/`` -> ``graphormer_urpe/<p>/``,
    ``tests/bench/`` -> ``bench/``, ``tests/scripts/`` -> the repository root (the entry scripts)."""
    relative = test_folder.relative_to(TESTS)
    if relative.parts[:1] == ("scripts",):
        return REPO / Path(*relative.parts[1:])
    if relative.parts[:1] == ("bench",):
        return REPO / relative
    return PACKAGE / relative


def misplaced(test_file: Path) -> str | None:
    """Why ``test_file`` breaks the rule, or None. The rule: ``tests/<folder>/test_<name>.py`` tests the
    module ``<name>`` of the folder it mirrors (:func:`mirrored_folder`), or that package as a whole when
    ``<name>`` is the folder's own name, ``<name>`` optionally followed by ``_<aspect>``; the files directly
    in ``tests/`` test the repository as a whole."""
    if test_file.parent == TESTS:
        return None
    folder = mirrored_folder(test_file.parent)
    where = f"{folder.relative_to(REPO)}/" if folder != REPO else "the repository root"
    if not folder.is_dir():
        return f"{test_file.relative_to(REPO)}: mirrors {where}, which does not exist"
    subjects = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    if folder != REPO:
        subjects.add(folder.name)
    name = test_file.stem.removeprefix("test_")
    if name in subjects or any(name.startswith(f"{subject}_") for subject in subjects):
        return None
    return f"{test_file.relative_to(REPO)}: {name!r} neither is nor begins with a module of {where}"


def imports_of_tests(source: str) -> list[str]:
    """The imports in ``source`` of the ``tests`` package or of a test module (``conftest``, ``test_*``),
    relative ones included: what no file under ``tests/`` may import."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")] if node.level else [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [
            name
            for name in names
            if name.startswith(".")
            or name.split(".")[0] in ("tests", "conftest")
            or name.split(".")[0].startswith("test_")
        ]
    return found


def test_the_test_tree_rules_are_checked_as_stated() -> None:
    placed = [
        "model/test_attention.py",
        "model/test_graphormer_official_options.py",
        "data/mag240m/test_mag240m.py",
        "data/mag240m/test_mag240m_training.py",
        "scripts/test_evaluate_ogb.py",
        "bench/test_common.py",
        "test_docs.py",
    ]
    assert [misplaced(TESTS / name) for name in placed] == [None] * len(placed)
    assert misplaced(TESTS / "data" / "test_attention.py") == (
        "tests/data/test_attention.py: 'attention' neither is nor begins with a module of graphormer_urpe/data/"
    )
    assert misplaced(TESTS / "scripts" / "test_scripts.py") == (
        "tests/scripts/test_scripts.py: 'scripts' neither is nor begins with a module of the repository root"
    )
    assert misplaced(TESTS / "widgets" / "test_knob.py") == (
        "tests/widgets/test_knob.py: mirrors graphormer_urpe/widgets/, which does not exist"
    )
    source = textwrap.dedent("""
        import tests.conftest
        from tests.conftest import REPO
        from . import test_train
        from .test_train import synthetic_run
        from test_train import synthetic_run
        import conftest
        from graphormer_urpe.testing.runs import synthetic_run
        import common, testing_tools
        def late():
            from tests import helpers
    """)
    assert imports_of_tests(source) == [
        "tests.conftest",
        "tests.conftest",
        ".",
        ".test_train",
        "test_train",
        "conftest",
        "tests",
    ]


def test_every_test_file_sits_in_the_folder_of_what_it_tests() -> None:
    assert [reason for path in sorted(TESTS.rglob("test_*.py")) if (reason := misplaced(path))] == []


def test_no_test_file_imports_tests_or_another_test_module() -> None:
    imported = {
        str(path.relative_to(REPO)): names
        for path in sorted(TESTS.rglob("*.py"))
        if (names := imports_of_tests(path.read_text()))
    }
    assert imported == {}


def test_tests_hold_test_files_fixtures_and_package_markers_only() -> None:
    """Helpers live in ``graphormer_urpe/testing/``, fixtures in ``tests/conftest.py``, and every folder is a
    package, so that two folders may hold test files of the same name."""
    others = [
        str(p.relative_to(REPO))
        for p in TESTS.rglob("*.py")
        if not p.name.startswith("test_") and p.name != "__init__.py" and p != TESTS / "conftest.py"
    ]
    assert others == []
    folders = [p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert [str(p.relative_to(REPO)) for p in folders if not (p / "__init__.py").is_file()] == []
