"""Every example in the docstrings of the library and of the course beside it runs and prints
what it says (doctest).

One test per module, so `make test` runs them all; modules that need torch are skipped with
the reason when torch is absent.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util

import pytest

from test_layers import COURSE, MODULES, PKG

TORCH_MODULES = tuple(f"devplace_lite.{m}" for m in ("zoo", "profile", "pipeline", "rl", "commands.plan", "commands.profile",
                                                     "commands.place_rl")) + (f"{COURSE}.data_build",)
#: The course's modules, named as the library's are (a package's ``__init__`` by the package).
COURSE_MODULES = sorted(".".join(p.relative_to(PKG.parent).with_suffix("").parts).removesuffix(".__init__")
                        for p in (PKG.parent / COURSE).rglob("*.py"))


@pytest.mark.parametrize("mod", sorted(f"devplace_lite.{m}" for m in MODULES if m) + COURSE_MODULES)
def test_docstring_examples(mod):
    if mod.startswith(TORCH_MODULES) and importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    module = importlib.import_module(mod)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for t in finder.find(module, mod):
        if t.examples:
            runner.run(t, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)
