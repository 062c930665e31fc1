"""The documentation: the MkDocs site builds with --strict (every page in the nav, every link and
anchor resolving, every API-reference module importable), and the README stays a landing page
whose relative links all resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
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
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO_DIR / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=REPO_DIR, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    problems = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "\n".join(problems) or done.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "contributing" / "index.html").is_file()


def test_readme_is_a_landing_page() -> None:
    lines = README.read_text().count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; move details into docs/ (limit {README_MAX_LINES})"


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


def test_link_checks_catch_what_they_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# The default run, measured\n```\n## not a heading\n```\n## What is exact, and how it is tested\n")
    assert heading_anchors(page) == {"the-default-run-measured", "what-is-exact-and-how-it-is-tested"}
    text = "[a](docs/a.md) `[b](b.md)` ![c](c.png)\n```\n[d](d.md)\n```\n[e](https://x.org)"
    assert LINK.findall(markdown_outside_code(text)) == ["docs/a.md", "c.png", "https://x.org"]


def test_ci_runs_the_readmes_test_command_installing_the_tested_torch_which_the_package_accepts_as_a_range() -> None:
    command = (REPO_DIR / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert command.startswith("python3 -m venv .venv && ") and 'pip install -q torch==2.13.0 -e ".[test]"' in command
    assert command.removeprefix("python3 ") in README.read_text()  # the README's test command, verbatim
    dependencies = tomllib.loads((REPO_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch>=2.6" in dependencies
    assert [requirement for requirement in dependencies if "==" in requirement] == []  # no exact pins
