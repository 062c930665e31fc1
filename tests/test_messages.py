"""One way to say it: the package's messages and the docs name the command a user runs. The package says
``graphormer-urpe <subcommand>``; the docs also show the checkout's ``python train.py`` and ``python evaluate.py``,
the benchmarks' ``python bench/...`` and the examples' ``python examples/...``. Neither names a module path
(``python -m graphormer_urpe...``; its test and benchmark tools in ``testing/`` aside) or another script
(``python seeds.py``: ``graphormer-urpe sweep``)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from graphormer_urpe.testing import REPO_DIR

#: What the package's strings and comments may not name: the checkout's scripts and the package's module paths.
PACKAGE_OLD_FORM = re.compile(r"(?<![\w/])(?:train|evaluate|seeds)\.py\b|python3? +-m +graphormer_urpe")
#: String literals the package keeps for what they read, not say: run records written before
#: ``graphormer-urpe train`` named ``train.py`` (``convert/pretrained.py`` writes them as ``python train.py``).
READ_NOT_SAID = {("graphormer_urpe/convert/pretrained.py", '"train.py"')}
#: A command a doc line runs with Python: a module (``-m``) or a script.
PYTHON_COMMAND = re.compile(r"\bpython3? +(?:-m +(?P<module>[\w.]+)|(?P<script>[\w./-]+\.py)\b)")
#: Modules the docs may run with ``python -m``: tools, the benchmarks (``bench.x``) and the package's test and benchmark
#: tools (``graphormer_urpe.testing.x``, which the package's checks leave out too: synthetic releases for benchmarks,
#: never a user's command); not the package's commands.
TOOL_MODULES = re.compile(r"(?:pytest|pip|venv|mkdocs|bench(?:\.\w+)+|graphormer_urpe\.testing\.\w+)")
#: Scripts the docs may run: the checkout's two documented entry points, the benchmarks and the examples.
ENTRY_SCRIPTS = re.compile(r"(?:\./)?(?:train\.py|evaluate\.py|(?:bench|examples)/[\w./-]+\.py)")
#: The checkout's sweep script, which a page may name only as one of the checkout's files (a line that says so), never
#: as what runs (``seeds.py --seeds 0 1``, "SIGTERM to ``seeds.py``"): that is ``graphormer-urpe sweep``.
SEEDS_SCRIPT = re.compile(r"(?<![\w/])seeds\.py\b")
AS_A_FILE = re.compile(r"checkout|\broot\b|entry scripts")
#: The pages checked: the README and every docs page.
DOC_FILES = ("README.md", "docs/*.md")


def package_messages(path: Path) -> list[tuple[int, str]]:
    """The string literals (docstrings and f-strings included) and comments of a module, with their lines."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [(token.start[0], token.string) for token in tokens if token.type in (tokenize.STRING, tokenize.COMMENT)]


def package_problems(root: Path) -> list[str]:
    """``file:line: text`` for every string or comment of the package outside ``testing/`` that names an old form."""
    problems = []
    for path in sorted((root / "graphormer_urpe").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith("graphormer_urpe/testing/"):
            continue
        for line, text in package_messages(path):
            if (name, text) in READ_NOT_SAID:
                continue
            problems += [
                f"{name}:{line + text[: found.start()].count(chr(10))}: {found.group()}"
                for found in PACKAGE_OLD_FORM.finditer(text)
            ]
    return problems


def doc_line_problems(line: str) -> list[str]:
    """What a line of the docs runs that is not a documented entry point."""
    problems = []
    for found in PYTHON_COMMAND.finditer(line):
        module, script = found.group("module"), found.group("script")
        if module is not None and not TOOL_MODULES.fullmatch(module):
            problems.append(found.group())
        if script is not None and not ENTRY_SCRIPTS.fullmatch(script):
            problems.append(found.group())
    if not AS_A_FILE.search(line):
        problems += [found.group() + " (not as the checkout's file)" for found in SEEDS_SCRIPT.finditer(line)]
    return problems


def doc_problems(root: Path) -> list[str]:
    """``page:line: command`` for every command of the README and the docs that is not a documented entry point."""
    return [
        f"{page.relative_to(root).as_posix()}:{number}: {problem}"
        for pattern in DOC_FILES
        for page in sorted(root.glob(pattern))
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for problem in doc_line_problems(line)
    ]


def test_no_package_message_names_a_module_path_or_a_script() -> None:
    assert package_problems(REPO_DIR) == []


def test_no_doc_line_runs_a_module_path_or_a_script_that_is_not_an_entry_point() -> None:
    assert doc_problems(REPO_DIR) == []


@pytest.mark.parametrize(
    "line, problems",
    [
        ("python -m graphormer_urpe.convert official A B", ["python -m graphormer_urpe.convert"]),
        ("`python3 -m graphormer_urpe.commands train --config x`", ["python3 -m graphormer_urpe.commands"]),
        ("python seeds.py --config qm9_gap --seeds 0 1", ["python seeds.py", "seeds.py (not as the checkout's file)"]),
        ("blended as `seeds.py --ensemble --trees` does", ["seeds.py (not as the checkout's file)"]),
        ("SIGTERM to `seeds.py` stops the running seed", ["seeds.py (not as the checkout's file)"]),
        ("python scripts/make.py", ["python scripts/make.py"]),
        ("python train.py --config zinc_subset.yaml; python evaluate.py --model X", []),
        ("python bench/speed/train_throughput.py --device cuda; python examples/pyg_loop.py", []),
        ("python -m pytest -n 2; python -m venv .venv; python -m bench.mag", []),
        ("python -m graphormer_urpe.testing.mag240m_release /tmp/mag --papers 20000", []),
        ("graphormer-urpe sweep --seeds 0 1; tests/scripts/test_seeds.py; the root seeds.py is the sweep", []),
        ("    train.py  evaluate.py  seeds.py   graphormer-urpe train, evaluate, sweep, for a checkout", []),
    ],
)
def test_the_doc_check_finds_what_it_should(line: str, problems: list[str]) -> None:
    assert doc_line_problems(line) == problems


def test_the_package_check_finds_what_it_should(tmp_path: Path) -> None:
    module = tmp_path / "graphormer_urpe" / "run" / "mod.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        '"""A module\n\nrun by ``train.py``."""\n\n# as seeds.py does\n'
        'X = f"use python -m graphormer_urpe.convert {1}"\n'
        'Y = "graphormer-urpe train --config x; tests/scripts/test_seeds.py"\n'
    )
    (tmp_path / "graphormer_urpe" / "testing").mkdir()
    (tmp_path / "graphormer_urpe" / "testing" / "runs.py").write_text('SCRIPT = "train.py"\n')
    assert package_problems(tmp_path) == [
        "graphormer_urpe/run/mod.py:3: train.py",
        "graphormer_urpe/run/mod.py:5: seeds.py",
        "graphormer_urpe/run/mod.py:6: python -m graphormer_urpe",
    ]
