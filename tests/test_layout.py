"""The folder layout is the architecture: imports only go down, MAG240M stays in its folder,
test tooling stays out of the library, and non-molecular sources never load RDKit."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "graphormer_urpe"

#: Layer of each top-level part of the package; a module may import only from its own layer or lower.
LAYERS = {"constants": 0, "errors": 0, "model": 1, "data": 1, "tasks": 2, "evaluation": 3, "run": 4, "convert": 5,
          "testing": 6}


def imports(path: Path) -> list[str]:
    """Every ``graphormer_urpe...`` module a file imports (at module level or inside functions)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("graphormer_urpe"):
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names if a.name.startswith("graphormer_urpe")]
    return names


def part(module: str) -> str:
    """``graphormer_urpe.data.cache`` -> ``data``; the package root itself -> ``""``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else ""


def library_files() -> list[tuple[str, Path]]:
    return [(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts), p) for p in PACKAGE.rglob("*.py")]


def test_imports_only_go_down_the_layers() -> None:
    upward = []
    for module, path in library_files():
        if part(module) not in LAYERS:  # the package's __init__: the public API, above everything
            continue
        for target in imports(path):
            if part(target) in LAYERS and LAYERS[part(target)] > LAYERS[part(module)]:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_model_depends_on_its_input_contract_alone() -> None:
    for module, path in library_files():
        if part(module) == "model":
            allowed = ("graphormer_urpe.model", "graphormer_urpe.constants", "graphormer_urpe.errors",
                       "graphormer_urpe.data.batch",
                       "graphormer_urpe.data.pyg_interop")  # the input contract: our batch, or a PyG one
            outside = [t for t in imports(path) if not t.startswith(allowed)]
            assert outside == [], module


def test_core_data_pipeline_never_imports_mag240m_or_synthetic_code() -> None:
    leaks = []
    for module, path in library_files():
        if module.startswith("graphormer_urpe.data.") and not module.startswith(("graphormer_urpe.data.mag240m",
                                                                                   "graphormer_urpe.data.synthetic")):
            leaks += [f"{module} -> {t}" for t in imports(path)
                      if t.startswith(("graphormer_urpe.data.mag240m", "graphormer_urpe.data.synthetic"))]
    assert leaks == []


def test_test_tooling_stays_out_of_the_library() -> None:
    leaks = [f"{module} -> {t}" for module, path in library_files() if part(module) != "testing"
             for t in imports(path) if part(t) == "testing"]
    assert leaks == []


@pytest.mark.slow
def test_non_molecular_sources_do_not_load_rdkit() -> None:
    code = ("import sys\n"
            "import graphormer_urpe, graphormer_urpe.data.sources.zinc, graphormer_urpe.data.sources.pyg\n"
            "import graphormer_urpe.data.datamodule, graphormer_urpe.data.cache\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rdkit', 'ogb')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_the_errors_module_is_the_ground_floor() -> None:
    assert imports(PACKAGE / "errors.py") == []
