"""Every example in the library's docstrings runs and prints what it says (doctest).

One test per module, so `make test` runs them all; modules that need torch are skipped with
the reason when torch is absent.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util

import pytest

from test_layers import MODULES

TORCH_MODULES = ("zoo", "profile", "pipeline", "rl", "commands.plan", "commands.profile", "commands.place_rl",
                 "course.data_build", "multidim.run")


@pytest.mark.parametrize("mod", sorted(m for m in MODULES if m))
def test_docstring_examples(mod):
    if mod.startswith(TORCH_MODULES) and importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    module = importlib.import_module(f"devplace_lite.{mod}")
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for t in finder.find(module, f"devplace_lite.{mod}"):
        if t.examples:
            runner.run(t, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)
