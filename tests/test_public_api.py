"""The public API: every name in ``graphormer_urpe.__all__`` exists, has a docstring example, and
every example runs (doctest)."""

from __future__ import annotations

import doctest
import subprocess
import sys

import pytest

import graphormer_urpe


@pytest.mark.parametrize("name", graphormer_urpe.__all__)
def test_public_name_has_a_docstring_example_that_runs(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that name a data root must not touch the checkout
    obj = getattr(graphormer_urpe, name)
    tests = [
        t for t in doctest.DocTestFinder().find(obj, name, globs=vars(sys.modules[obj.__module__]).copy()) if t.examples
    ]
    assert tests, f"{name} has no '>>>' example in its docstring"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} failing example(s) in {name} (output above)"


def test_module_docstring_examples_run() -> None:
    from graphormer_urpe.data import pyg_interop, structure
    from graphormer_urpe.run import finetune
    from graphormer_urpe.tasks import optimiser

    for module in (pyg_interop, structure, optimiser, finetune):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__  # a module without examples: stale here


@pytest.mark.slow
def test_import_does_not_load_lightning_and_lightning_names_load_on_use() -> None:
    code = (
        "import sys, graphormer_urpe; assert 'pytorch_lightning' not in sys.modules; "
        "from graphormer_urpe import GraphRegression, GraphDataModule; "
        "assert GraphRegression.__module__ == 'graphormer_urpe.tasks.graph'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="has no attribute 'Graphormr'"):
        _ = graphormer_urpe.Graphormr
