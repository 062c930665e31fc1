"""The documentation: the MkDocs site builds with --strict (every page in the nav, every link and
anchor resolving, every API-reference module importable), the nav of mkdocs.yml is the one list of
pages, the README stays a landing page whose relative links all resolve, and every docs page and
section that the code names exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

REPO_DIR = Path(__file__).resolve().parents[1]
README = REPO_DIR / "README.md"
#: The README is a landing page; everything else lives in docs/.
README_MAX_LINES = 260
#: Inline Markdown links and images: [text](target) and ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_outside_code(text: str) -> str:
    """``text`` without its fenced code blocks and inline code spans (links there are not links)."""
    kept, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def heading_anchors(markdown_file: Path) -> set[str]:
    """Anchors of the headings of a Markdown file, as MkDocs' ``toc`` extension makes them."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", markdown_outside_code(markdown_file.read_text()), re.M)
    return {slugify(heading, "-") for heading in headings}


@pytest.mark.slow
def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(REPO_DIR / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    problems = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "\n".join(problems) or done.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "contributing" / "index.html").is_file()


def test_readme_is_a_landing_page() -> None:
    lines = README.read_text().count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; move details into docs/ (limit {README_MAX_LINES})"


def test_running_md_quotes_the_unknown_key_message_the_cli_prints() -> None:
    """The message itself is pinned by ``tests/run/test_cli.py`` (``model.encoder.num_layerz: no such option``)."""
    running = (REPO_DIR / "docs" / "running.md").read_text()
    assert "[ERROR] model.encoder.num_layerz: no such option" in running
    assert "is not expected" not in running  # jsonargparse's own report, which the CLI turns into the line above


def test_every_relative_link_of_the_readme_resolves() -> None:
    broken = []
    for target in LINK.findall(markdown_outside_code(README.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (README.parent / path).resolve() if path else README
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.relative_to(REPO_DIR)}")
    assert not broken, "README.md links that do not resolve:\n" + "\n".join(broken)
    assert LINK.search(README.read_text()), "the pattern finds no link at all"


def nav_pages(nav: object) -> list[str]:
    """The pages of an mkdocs ``nav`` (nested lists of ``{title: page or nav}``), in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for entry in nav for page in nav_pages(entry)]


#: A table row or list item that begins with a link to a Markdown page: an entry of a list of pages.
PAGE_ENTRY = re.compile(r"^\s*(\|\s*|[*+-]\s+|\d+\.\s+)\[[^\]]*\]\([^)\s#]+\.md(#[^)]*)?\)")


def page_entries(text: str) -> list[str]:
    """The lines of ``text`` that are entries of a list of pages (:data:`PAGE_ENTRY`)."""
    return [line for line in markdown_outside_code(text).splitlines() if PAGE_ENTRY.match(line)]


def test_the_nav_of_mkdocs_yml_lists_every_page_once_and_nothing_lists_them_again() -> None:
    config = yaml.safe_load((REPO_DIR / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    docs = REPO_DIR / config["docs_dir"]
    unlisted = {line.strip().lstrip("/") for line in config["not_in_nav"].splitlines() if line.strip()}
    pages = sorted(str(page.relative_to(docs)) for page in docs.rglob("*.md"))
    assert sorted(listed) == sorted(set(listed)), "a page is in the nav twice"
    assert sorted([*listed, *unlisted]) == pages, "docs/*.md and the nav of mkdocs.yml (plus not_in_nav) differ"
    for document in (README, docs / "index.md"):
        assert page_entries(document.read_text()) == [], f"{document.name} lists pages: link to the nav instead"


def test_a_list_of_pages_is_recognised() -> None:
    text = (
        "| page | |\n|---|---|\n| [Tests](docs/testing.md) | what each test pins |\n"
        "* [Running](running.md#the-default-run-measured)\n1. [Home](index.md)\n"
        "| `qm9_gap.yaml` | see [PCQM4Mv2](docs/ogb-lsc.md) |\nRead [Tasks](docs/tasks.md) first.\n"
    )
    assert page_entries(text) == [
        "| [Tests](docs/testing.md) | what each test pins |",
        "* [Running](running.md#the-default-run-measured)",
        "1. [Home](index.md)",
    ]


def test_link_checks_catch_what_they_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# The default run, measured\n```\n## not a heading\n```\n## What is exact, and how it is tested\n")
    assert heading_anchors(page) == {"the-default-run-measured", "what-is-exact-and-how-it-is-tested"}
    text = "[a](docs/a.md) `[b](b.md)` ![c](c.png)\n```\n[d](d.md)\n```\n[e](https://x.org)"
    assert LINK.findall(markdown_outside_code(text)) == ["docs/a.md", "c.png", "https://x.org"]


#: Where the code names docs pages: the package, the scripts, the benchmarks, the examples and the configs.
POINTING_FILES = (
    "graphormer_urpe/**/*.py",
    "*.py",
    "bench/**/*.py",
    "examples/**/*.py",
    "graphormer_urpe/configs/*.yaml",
)
#: A docs page named in code, with an optional section: ``docs/running.md#what-is-safe`` (an anchor) or
#: ``docs/running.md, "What is safe"`` (a heading's title, in double or single quotes).
DOCS_POINTER = re.compile(r"docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+)|,\s*\"([^\"\n]+)\"|,\s*'([^'\n]+)')?")


def docs_pointers(text: str) -> list[tuple[str, str | None]]:
    """The ``(page, section)`` pairs that ``text`` names (:data:`DOCS_POINTER`); the section is an anchor, a
    heading's title, or None for the whole page."""
    return [(page, anchor or double or single or None) for page, anchor, double, single in DOCS_POINTER.findall(text)]


def section_problem(page: Path, section: str, docs: Path) -> str | None:
    """Why ``section`` (an anchor or a heading's title) is not a place in ``page``, or None when it is: a heading
    whose anchor is the section or its slug, or a paragraph opening with it in bold (``**Parameters: ...**``)."""
    if {section, slugify(section, "-")} & heading_anchors(page):
        return None
    if re.search(rf"^\*\*{re.escape(section)}\b", markdown_outside_code(page.read_text()), re.M):
        return None
    return f"no heading {section!r} in docs/{page.relative_to(docs)}"


def pointer_problems(named_in: str, text: str, docs: Path) -> list[str]:
    """What is wrong with every docs pointer of ``text`` (from file ``named_in``): a missing page or section."""
    problems = []
    for page, section in docs_pointers(text):
        if not (docs / page).is_file():
            problems.append(f"{named_in}: docs/{page} does not exist")
        elif section is not None and (problem := section_problem(docs / page, section, docs)) is not None:
            problems.append(f"{named_in}: docs/{page}, {problem}")
    return problems


def test_every_docs_page_and_section_the_code_names_exists() -> None:
    problems, pointers = [], 0
    for pattern in POINTING_FILES:
        for file in sorted(REPO_DIR.glob(pattern)):
            text = file.read_text()
            pointers += len(docs_pointers(text))
            problems += pointer_problems(str(file.relative_to(REPO_DIR)), text, REPO_DIR / "docs")
    assert not problems, "docs pointers that do not resolve:\n" + "\n".join(problems)
    assert pointers > 50, f"the pattern finds only {pointers} pointers"


def test_docs_pointer_checks_catch_what_they_should(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "reference").mkdir(parents=True)
    (docs / "model.md").write_text("# The model\n## Index conventions\n```\n## Not a heading\n```\n")
    (docs / "ogb-lsc.md").write_text("# OGB-LSC\n\n**Parameters: 9,649,217 (URPE).** The difference ...\n")
    (docs / "reference" / "testing.md").write_text("# Testing\n")
    text = (
        'See docs/model.md, "Index conventions"; docs/model.md#index-conventions and docs/reference/testing.md.\n'
        "(docs/ogb-lsc.md, 'Parameters') docs/gone.md docs/model.md, \"Not a heading\" docs/model.md#the-mode"
    )
    assert docs_pointers(text) == [
        ("model.md", "Index conventions"),
        ("model.md", "index-conventions"),
        ("reference/testing.md", None),
        ("ogb-lsc.md", "Parameters"),
        ("gone.md", None),
        ("model.md", "Not a heading"),
        ("model.md", "the-mode"),
    ]
    assert pointer_problems("x.py", text, docs) == [
        "x.py: docs/gone.md does not exist",
        "x.py: docs/model.md, no heading 'Not a heading' in docs/model.md",
        "x.py: docs/model.md, no heading 'the-mode' in docs/model.md",
    ]


def test_ci_runs_the_readmes_test_command_installing_the_tested_torch_which_the_package_accepts_as_a_range() -> None:
    command = (REPO_DIR / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert command.startswith("python3 -m venv .venv && ") and 'pip install -q torch==2.13.0 -e ".[test]"' in command
    assert command.removeprefix("python3 ") in README.read_text()  # the README's test command, verbatim
    dependencies = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch>=2.6" in dependencies
    assert [requirement for requirement in dependencies if "==" in requirement] == []  # no exact pins


#: The paragraph of docs/contributing.md that walks a resume through the code, one ``file:line`` per stop.
RESUME_WALK = re.compile(r"^`commands/__main__\.py:\d+` →.*?\n\n", re.MULTILINE | re.DOTALL)
#: A stop: ``path:line`` (a new file) or ``:line`` (the file before).
STOP = re.compile(r"`((?:[\w/]+\.py)?):(\d+)`")
DEFINITION = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s")


def walk_stops(text: str) -> list[tuple[str, int]]:
    """The ``(file under graphormer_urpe/, line)`` stops of the resume walk in ``text``, each file carried forward."""
    walk = RESUME_WALK.search(text)
    assert walk is not None, "docs/contributing.md: the resume walk (`commands/__main__.py:N` → ...) is missing"
    stops, path = [], ""
    for named, line in STOP.findall(walk.group(0)):
        path = named or path
        stops.append((path, int(line)))
    return stops


def test_every_stop_of_the_resume_walk_is_a_definition() -> None:
    """docs/contributing.md walks a resume with ``file:line`` stops: each must land on a ``def`` or ``class`` line
    of the code today, or the walk has gone stale (lines move with every edit)."""
    stops = walk_stops((REPO_DIR / "docs" / "contributing.md").read_text())
    assert len(stops) > 10
    stale = []
    for path, line in stops:
        lines = (REPO_DIR / "graphormer_urpe" / path).read_text().splitlines()
        if not (line <= len(lines) and DEFINITION.match(lines[line - 1])):
            stale.append(f"{path}:{line}")
    assert not stale, f"not a definition any more: {', '.join(stale)}"


def test_the_walk_check_finds_a_stale_stop() -> None:
    text = "`commands/__main__.py:61` → `run/ledger.py:1`, `:2`\n\n"
    assert walk_stops(text) == [("commands/__main__.py", 61), ("run/ledger.py", 1), ("run/ledger.py", 2)]
    line = (REPO_DIR / "graphormer_urpe" / "run" / "ledger.py").read_text().splitlines()[0]
    assert not DEFINITION.match(line)  # its docstring: a stop there would be reported
