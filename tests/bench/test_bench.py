"""bench/ as a whole: its index (bench/README.md) names every script and only scripts that exist, and its links to the
docs resolve; every documented command names an existing script; every script reaches the rest of bench/ the one way
the index describes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from markdown.extensions.toc import slugify

from graphormer_urpe.testing import REPO_DIR

BENCH = REPO_DIR / "bench"
INDEX = BENCH / "README.md"
#: The line that puts the repository root on the path of a script in ``bench/<group>/`` (bench/README.md).
PATH_LINE = (
    "sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for bench.* (bench/README.md)"
)
#: A command that runs a script of bench/: ``python bench/gpu/gpu_check.py``, ``bash bench/gpu/gpu_rehearsal.sh``.
COMMAND = re.compile(r"\b(?:python3?|bash)\s+(bench/[\w./-]+)")
#: The first cell of a row of the index's tables: a script's path in bench/, in backquotes.
INDEXED = re.compile(r"^\| `([\w./-]+\.(?:py|sh))` \|", re.M)
#: A link of the index to a docs page, with its optional anchor: ``(../docs/gpu.md#the-command)``.
DOCS_LINK = re.compile(r"\]\(\.\./docs/([\w-]+\.md)(?:#([\w-]+))?\)")


def scripts(bench: Path) -> set[str]:
    """Every script of ``bench`` (``.py`` and ``.sh``), as a path relative to it; ``results/`` (what running
    benchmarks write) left out."""
    return {
        str(path.relative_to(bench))
        for path in bench.rglob("*")
        if path.suffix in (".py", ".sh")
        and path.relative_to(bench).parts[0] != "results"
        and "__pycache__" not in path.parts
    }


def index_problems(index: str, present: set[str]) -> list[str]:
    """What is wrong with the index ``index`` of the scripts ``present``: a script it does not name, a script it
    names that does not exist."""
    named = set(INDEXED.findall(index))
    return [f"{name}: not in the index" for name in sorted(present - named)] + [
        f"{name}: in the index, not in bench/" for name in sorted(named - present)
    ]


def link_problems(index: str, docs: Path) -> list[str]:
    """The links of ``index`` to a docs page that does not exist, or to an anchor that no heading of the page has."""
    problems = []
    for page, anchor in DOCS_LINK.findall(index):
        if not (docs / page).is_file():
            problems.append(f"docs/{page}: no such page")
        elif anchor and anchor not in {
            slugify(h, "-") for h in re.findall(r"^#+ (.+)$", (docs / page).read_text(), re.M)
        }:
            problems.append(f"docs/{page}#{anchor}: no such heading")
    return problems


def command_problems(text: str, repo: Path) -> tuple[int, list[str]]:
    """How many commands of bench/ scripts ``text`` holds, and those whose script does not exist under ``repo``."""
    paths = COMMAND.findall(text)
    return len(paths), [f"{path}: no such script" for path in paths if not (repo / path).is_file()]


def imports_bench(source: str) -> bool:
    """Whether ``source`` imports a module of bench/ (``bench``, ``bench.common``, ``from bench.speed import x``)."""
    for node in ast.walk(ast.parse(source)):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        if any(name == "bench" or name.startswith("bench.") for name in names):
            return True
    return False


def path_problems(name: str, source: str) -> list[str]:
    """What breaks the one way a script (``name``, its text ``source``) reaches bench/: a script in a group that
    imports bench/ holds :data:`PATH_LINE` once, before its first import of bench/; no script inserts into
    ``sys.path`` or imports a module of bench/ by its bare name (``from common import ...``)."""
    problems = []
    if "sys.path.insert" in source:
        problems.append(f"{name}: sys.path.insert (bench/README.md, 'Running a script')")
    if re.search(r"^(?:from|import) (?:common|train_throughput|step_memory|small_data|gpu_check)\b", source, re.M):
        problems.append(f"{name}: a module of bench/ imported by its bare name, not as bench.<group>.<name>")
    if imports_bench(source) and len(Path(name).parts) == 2:
        lines = source.splitlines()
        first = next(k for k, line in enumerate(lines) if re.match(r"(from|import) bench\b", line.strip()))
        if lines.count(PATH_LINE) != 1 or lines.index(PATH_LINE) > first:
            problems.append(f"{name}: imports bench/ without the one path line before it")
    return problems


def test_the_index_names_every_script_and_no_other() -> None:
    present = scripts(BENCH)
    assert len(present) > 20 and "gpu/gpu_check.py" in present and "common.py" in present
    assert index_problems(INDEX.read_text(), present) == []
    assert len(DOCS_LINK.findall(INDEX.read_text())) > 20 and link_problems(INDEX.read_text(), REPO_DIR / "docs") == []


def test_every_command_of_the_index_and_the_docs_names_an_existing_script() -> None:
    files = [
        INDEX,
        REPO_DIR / "README.md",
        *sorted((REPO_DIR / "docs").glob("*.md")),
        *sorted(BENCH.rglob("*.py")),
        *sorted(BENCH.rglob("*.sh")),
    ]
    texts = {path: path.read_text() for path in files}
    counts, problems = {}, []
    for path, text in texts.items():
        counts[path], found = command_problems(text, REPO_DIR)
        problems += [f"{path.relative_to(REPO_DIR)}: {problem}" for problem in found]
    assert problems == []
    assert counts[INDEX] > 20 and sum(counts.values()) > 80  # the pattern finds the commands


def test_every_script_reaches_bench_one_way() -> None:
    sources = {name: (BENCH / name).read_text() for name in sorted(scripts(BENCH)) if name.endswith(".py")}
    assert sum(imports_bench(source) for source in sources.values()) > 10
    assert [problem for name, source in sources.items() for problem in path_problems(name, source)] == []


def test_tests_import_bench_by_full_names() -> None:
    """No test puts ``bench/`` itself on the path (its folders would shadow top-level names: ``data``, ``gpu``)."""
    tests = sorted((REPO_DIR / "tests").rglob("*.py"))
    assert sum(imports_bench(path.read_text()) for path in tests) >= 8
    assert [
        str(path.relative_to(REPO_DIR)) for path in tests if re.search(r'REPO_DIR\s*/\s*"bench"\)', path.read_text())
    ] == []


def test_the_checks_catch_what_they_should(tmp_path: Path) -> None:
    index = "| script | what |\n|---|---|\n| `gpu/gpu_check.py` | the check |\n| `gone.py` | old |\n"
    assert index_problems(index, {"gpu/gpu_check.py", "speed/new.py"}) == [
        "speed/new.py: not in the index",
        "gone.py: in the index, not in bench/",
    ]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "gpu.md").write_text("# GPUs\n\n## The command\n")
    links = "[a](../docs/gpu.md#the-command) [b](../docs/gpu.md) [c](../docs/gpu.md#gone) [d](../docs/cpu.md)"
    assert link_problems(links, tmp_path / "docs") == ["docs/gpu.md#gone: no such heading", "docs/cpu.md: no such page"]
    (tmp_path / "bench" / "gpu").mkdir(parents=True)
    (tmp_path / "bench" / "gpu" / "gpu_check.py").write_text("")
    text = "    python bench/gpu/gpu_check.py --quick\n`python3 bench/gpu_check.py`, bash bench/gpu/rehearse.sh"
    assert command_problems(text, tmp_path) == (
        3,
        ["bench/gpu_check.py: no such script", "bench/gpu/rehearse.sh: no such script"],
    )
    good = f"import sys\nfrom pathlib import Path\n\n{PATH_LINE}\n\nfrom bench.common import REPO\n"
    assert path_problems("speed/x.py", good) == []
    assert path_problems("speed/x.py", "from bench.common import REPO\n" + good) == [
        "speed/x.py: imports bench/ without the one path line before it"
    ]
    assert path_problems("speed/x.py", good.replace("from bench.common", "from common")) == [
        "speed/x.py: a module of bench/ imported by its bare name, not as bench.<group>.<name>"
    ]
    assert path_problems("speed/x.py", 'import sys\nsys.path.insert(0, "bench")\n') == [
        "speed/x.py: sys.path.insert (bench/README.md, 'Running a script')"
    ]
    assert path_problems("speed/y.py", "import numpy\n") == [] and not imports_bench("import benchmark\n")
