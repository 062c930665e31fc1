"""run/provenance.py: the commit a record names is the one of this project's checkout only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from graphormer_urpe.run import provenance


def fake_package(root: Path, pyproject: str | None) -> Path:
    """A folder ``root`` holding ``graphormer_urpe/run/provenance.py`` (and ``pyproject.toml`` if given); returns the
    module's path, which :func:`provenance.git_commit` reads as its own."""
    module = root / "graphormer_urpe" / "run" / "provenance.py"
    module.parent.mkdir(parents=True)
    module.write_text("")
    if pyproject is not None:
        (root / "pyproject.toml").write_text(pyproject)
    return module


def git_init(directory: Path) -> None:
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *command], cwd=directory, check=True, capture_output=True)


def test_a_record_names_the_commit_of_this_checkout_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In this project's checkout: its commit. Installed (site-packages), or in a copy of the sources inside another
    repository, or where site-packages lies in a checkout of another project: "no git checkout", never the commit of
    a repository that merely encloses the package."""
    this = provenance.git_commit()
    assert len(this.removesuffix("-dirty")) == 40 and int(this.removesuffix("-dirty"), 16) >= 0
    ours = '[project]\nname = "graphormer-urpe"\n'
    site_packages = fake_package(tmp_path / "other" / ".venv" / "site-packages", None)
    (tmp_path / "other" / "pyproject.toml").write_text('[project]\nname = "another"\n')
    copied_sources = fake_package(tmp_path / "other" / "vendored", ours)
    other_project = fake_package(tmp_path / "third", '[project]\nname = "another"\n')
    git_init(tmp_path / "other")
    git_init(tmp_path / "third")
    for module in (site_packages, copied_sources, other_project):
        monkeypatch.setattr(provenance, "__file__", str(module))
        assert provenance.git_commit() == provenance.NO_CHECKOUT == "no git checkout", module
    checkout = fake_package(tmp_path / "checkout", ours)
    git_init(tmp_path / "checkout")
    monkeypatch.setattr(provenance, "__file__", str(checkout))
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path / "checkout", capture_output=True, text=True, check=True
    ).stdout.strip()
    assert provenance.git_commit() == commit
    (tmp_path / "checkout" / "pyproject.toml").write_text(ours + "# edited\n")
    assert provenance.git_commit() == f"{commit}-dirty"
