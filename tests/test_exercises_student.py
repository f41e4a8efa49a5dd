"""The student edition: solutions out, stubs in, checks kept; and it runs, reporting "not attempted"."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from devplace_course.exercises import exercises
from devplace_course.student import make_student, stub_source, student_notebook

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
NAMES = {"my_f": "99.1"}


def run_stub(src: str, name: str, *args):
    ns: dict = {}
    exec(src, ns)
    with pytest.raises(NotImplementedError, match=name):
        ns[name](*args)
    return ns


def test_stub_keeps_signature_docstring_and_imports():
    src = ('import numpy as np\nfrom math import ceil\n\n'
           'def my_f(graph, k: int = 2) -> float:\n    """What it computes."""\n'
           '    # the key idea: count each producer once\n    x = np.ones(k)\n    return float(x.sum())\n\n'
           'print(my_f(None))\n')
    out = stub_source(src, NAMES)
    assert out.startswith("# Exercise 99.1: write my_f here, then run the check below.")
    assert "import numpy as np" in out and "from math import ceil" in out
    assert 'def my_f(graph, k: int = 2) -> float:\n    """What it computes."""' in out
    assert "key idea" not in out and "np.ones" not in out and "print" not in out
    run_stub(out, "my_f", None)


def test_stub_of_undocumented_multiline_decorated_and_one_line_defs():
    src = ("import functools\n\n@functools.lru_cache\ndef helper(\n    a,\n    b,\n):\n    # secret\n    return a + b\n\n"
           "def one(x): return x + 1\n")
    out = stub_source(src, {})
    assert "@functools.lru_cache\ndef helper(\n    a,\n    b,\n):\n    raise NotImplementedError" in out
    assert "secret" not in out and "x + 1" not in out
    ns = run_stub(out, "helper", 1, 2)
    with pytest.raises(NotImplementedError):
        ns["one"](1)


def test_cells_without_functions_are_dropped():
    assert stub_source("assert res.passed\n", NAMES) is None
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("intro"),
                nbformat.v4.new_code_cell("def my_f(x):\n    return 2 * x\n", metadata={"tags": ["solution", "hide-input"]}),
                nbformat.v4.new_code_cell("res = check('99.1', my_f)"),
                nbformat.v4.new_code_cell("assert res.passed", metadata={"tags": ["remove-cell", "solution"]}),
                nbformat.v4.new_markdown_cell("the answer is 42", metadata={"tags": ["solution"]}),
                nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["remove-cell"]})]
    out, stubs, dropped = student_notebook(nb, NAMES)
    assert (stubs, dropped) == (1, 2)
    sources = [c.source for c in out.cells]
    assert len(sources) == 4 and [sources[0], *sources[2:]] == ["intro", "res = check('99.1', my_f)", "x = 1"]
    assert "raise NotImplementedError" in out.cells[1].source and out.cells[1].metadata == {}
    assert all("solution" not in c.metadata.get("tags", []) for c in out.cells)
    assert len(nb.cells) == 6 and "2 * x" in nb.cells[1].source  # the master is untouched


def test_an_answer_sketch_does_not_take_the_sections_after_it():
    """jupytext ends a markdown cell only at ``+++`` or code: a sketch tagged ``solution`` just
    before ``## Summary`` holds the chapter's last sections. The sketch goes, they stay."""
    sketch = ("````{admonition} A sketch of an answer\n:class: dropdown\n# inside the sketch\n"
              "```python\n## in a code block\n```\nthe answer\n````\n\n")
    rest = "## Summary\n\n* a point\n\n## Further reading\n\nA paper."
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("1. *(Think.)* Why?"),
                nbformat.v4.new_markdown_cell(sketch + rest, metadata={"tags": ["solution"]}),
                nbformat.v4.new_markdown_cell("the answer alone", metadata={"tags": ["solution"]})]
    out, stubs, dropped = student_notebook(nb, NAMES)
    assert (stubs, dropped) == (0, 2)
    assert [c.source for c in out.cells] == ["1. *(Think.)* Why?", rest]
    assert all("solution" not in c.metadata.get("tags", []) for c in out.cells)


def _headings(md_text: str) -> list[str]:
    """The headings of a MyST page as a markdown parser reads them (none inside a fenced block:
    code cells, admonitions), its front matter left out."""
    from markdown_it import MarkdownIt

    body = re.sub(r"\A---\n.*?\n---\n", "", md_text, count=1, flags=re.S)
    tokens = MarkdownIt("commonmark").parse(body)
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


#: Arithmetic written out: operands around a spaced operator (``D_s / d_s``, ``layers + 2``), or a
#: rounding (``ceil(``). A constraint the task sets (``x[v, d] = 0``) is no formula of the answer.
FORMULA = re.compile(r"[\w)\]]\s+(?:[-+*/%]|//|\*\*)\s+[\w(\[]|\b(?:ceil|floor)\(")


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("student") / "student"
    make_student(CHAPTERS, out)
    return out


def test_student_edition_layout(edition):
    chapters = sorted(p.name for p in CHAPTERS.glob("[0-9][0-9]_*.md"))
    assert sorted(p.name for p in (edition / "chapters").glob("[0-9][0-9]_*.md")) == chapters
    assert sorted(p.stem for p in (edition / "notebooks").glob("*.ipynb")) == [c[:-3] for c in chapters]
    for page in ("_config.yml", "_toc.yml", "notation.md", "bibliography.md", "references.bib", "_static/devplace.css"):
        assert (edition / "chapters" / page).exists(), page


@pytest.mark.parametrize("md", sorted(CHAPTERS.glob("[0-9][0-9]_*.md")), ids=lambda p: p.stem)
def test_solutions_removed_and_checks_kept(edition, md):
    master = jupytext.read(md)
    student = nbformat.read(edition / "notebooks" / f"{md.stem}.ipynb", as_version=4)
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
    checks = lambda nb: [c.source for c in nb.cells if c.cell_type == "code" and "check(" in c.source  # noqa: E731
                         and "solution" not in c.metadata.get("tags", [])]
    assert checks(student) == checks(master)
    solution_code = [c.source for c in master.cells if c.cell_type == "code" and "solution" in c.metadata.get("tags", [])]
    student_code = {ln.strip() for c in student.cells for ln in c.source.splitlines()}
    elsewhere = {ln.strip() for c in master.cells if "solution" not in c.metadata.get("tags", [])
                 for ln in c.source.splitlines()}
    for src in solution_code:  # no statement of a solution's body survives (unless the chapter has it elsewhere)
        spec = _docstring_lines(src)  # the stub keeps the docstring: it is the exercise's spec
        for n, line in enumerate(src.splitlines(), start=1):
            s = line.strip()
            if s and n not in spec and not s.startswith(("def ", "import ", "from ", '"""', "#", "@")) \
                    and s not in elsewhere:
                assert s not in student_code, f"{md.stem}: solution line leaked: {s}"
    for ex in exercises(md.name[:2]):
        stub = next(c.source for c in student.cells if re.search(rf"^def {ex.name}\(", c.source, re.M))
        ns: dict = {}
        exec(stub, ns)
        with pytest.raises(NotImplementedError, match=ex.id):
            ns[ex.name](*ex.case(0).args)


@pytest.mark.parametrize("md", sorted(CHAPTERS.glob("[0-9][0-9]_*.md")), ids=lambda p: p.stem)
def test_student_edition_keeps_every_heading_and_stubs_give_no_formula(edition, md):
    """Every heading of the full edition outside a solution (a solution's headings sit in its
    fenced admonition) is in the student edition, in order; and a stub's docstring states the
    task, not its solution's formula (the exercise's text gives what the student needs)."""
    student = (edition / "chapters" / md.name).read_text(encoding="utf-8")
    full = _headings(md.read_text(encoding="utf-8"))
    assert "Summary" in full or md.stem in ("00_preface", "90_reproduction"), f"{md.stem}: no Summary heading"
    assert _headings(student) == full, f"{md.stem}: the student edition lost {[h for h in full if h not in _headings(student)]}"
    for cell in jupytext.reads(student, fmt="md:myst").cells:
        if cell.cell_type != "code" or "NotImplementedError" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.FunctionDef):
                doc = ast.get_docstring(node) or ""
                assert not FORMULA.search(doc), f"{md.stem}: stub {node.name} states a formula: {doc!r}"


def _docstring_lines(src: str) -> set[int]:
    """Line numbers (from 1) of the docstrings in ``src``, however many lines each spans."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _with_solutions() -> list[Path]:
    return [md for md in sorted(CHAPTERS.glob("[0-9][0-9]_*.md"))
            if any("solution" in c.metadata.get("tags", []) for c in jupytext.read(md).cells)]


@pytest.mark.slow
@pytest.mark.parametrize("md", _with_solutions(), ids=lambda p: p.stem)
def test_student_edition_runs_and_reports_not_attempted(edition, md):
    """Only chapters with solutions differ from the master, which the notebook tests run: execute
    those, FAST, and see every check report "not attempted" and every cell run."""
    from nbclient import NotebookClient

    nb = nbformat.read(edition / "notebooks" / f"{md.stem}.ipynb", as_version=4)
    env = {**os.environ, "DEVPLACE_FAST": "1", "MPLBACKEND": "Agg"}
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(CHAPTERS)}}).execute(env=env)
    out = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    for ex in exercises(md.name[:2]):
        assert f"{ex.id} {ex.name}: not attempted" in out
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code"), "a cell did not run"


def _think_questions(nb) -> list[int]:
    """Indices of the cells that ask a Think question in a chapter's Exercises section."""
    start = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "## Exercises" in c.source), None)
    return [] if start is None else [i for i, c in enumerate(nb.cells) if i >= start and c.cell_type == "markdown"
                                     and "*(Think.)*" in c.source]


@pytest.mark.parametrize("md", sorted(CHAPTERS.glob("[0-9][0-9]_*.md")), ids=lambda p: p.stem)
def test_every_think_question_has_an_answer_key_and_rubric_only_for_instructors(edition, md):
    master = jupytext.read(md)
    for i in _think_questions(master):
        key = next(c for c in master.cells[i + 1:] if "solution" in c.metadata.get("tags", []))
        assert "A sketch of an answer" in key.source and "**Rubric" in key.source, f"{md.stem}: Think question without a key"
    student = (edition / "chapters" / md.name).read_text(encoding="utf-8")
    student_nb = (edition / "notebooks" / f"{md.stem}.ipynb").read_text(encoding="utf-8")
    for text in (student, student_nb):
        assert "A sketch of an answer" not in text and "Rubric" not in text, f"{md.stem}: an answer key leaked"


def test_coding_exercises_are_checked_and_the_others_say_what_they_are():
    """A *(Code.)* exercise has a check (the issue found two without); the rest are Think, Explore, Research."""
    labels = re.compile(r"^\d+\. \*\((Code|Think|Explore|Research)\.\)\*", re.M)
    for md in sorted(CHAPTERS.glob("[0-8][0-9]_*.md")):  # 90 and up: back matter (the reproduction appendix)
        text = md.read_text(encoding="utf-8")
        section = text[text.index("## Exercises"):]
        items = re.findall(r"^(\d+)\. \*\((\w+)\.\)\*", section, re.M)
        assert len(items) == len(labels.findall(section)), f"{md.stem}: an exercise without a known label"
        coded = {f"{md.name[:2]}.{n}" for n, kind in items if kind == "Code"}
        assert coded == {e.id for e in exercises(md.name[:2])}, f"{md.stem}: (Code.) labels and checks differ"
