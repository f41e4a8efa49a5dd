"""A notebook of the student edition, handed in with only its exercises filled in, is graded
without a review flag: the book's own cells (the hidden install cell with its ``importlib`` and
``subprocess``, the imports and checks) are not the student's code. Machinery the student adds
to an exercise is still listed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")

from devplace_course.exercises import exercises  # noqa: E402
from devplace_course.exercises.guard import inspect_statically  # noqa: E402
from devplace_course.exercises.worker import read_submission  # noqa: E402
from devplace_course.student import make_student  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "01"


def solutions(chapter: str) -> dict[str, str]:
    """Function name -> the book's solution cell that defines it."""
    md = next((ROOT / "chapters").glob(f"{chapter}_*.md"))
    out = {}
    for c in jupytext.read(md).cells:
        if c.cell_type == "code" and "solution" in c.metadata.get("tags", []):
            for e in exercises(chapter):
                if f"def {e.name}(" in c.source:
                    out[e.name] = c.source
    return out


def student_submission(tmp_path: Path, chapter: str = CHAPTER, edit=None) -> Path:
    """The student edition's notebook of ``chapter`` with every stub replaced by the book's
    solution (``edit`` may change the solutions first): what a diligent student hands in."""
    make_student(ROOT / "chapters", tmp_path / "edition")
    nb_path = next((tmp_path / "edition" / "notebooks").glob(f"{chapter}_*.ipynb"))
    nb = jupytext.read(nb_path)
    sols = solutions(chapter)
    assert sols, f"chapter {chapter} has no coding exercise"
    filled = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and "NotImplementedError" in cell.source:
            names = [n for n in sols if f"def {n}(" in cell.source]
            if names:
                cell.source = "\n\n".join(dict.fromkeys(sols[n] for n in names))
                if edit:
                    cell.source = edit(cell.source)
                filled += 1
    assert filled, "no stub cell found in the student edition"
    out = tmp_path / "hand-in" / nb_path.name
    out.parent.mkdir()
    jupytext.write(nb, out)
    return out


def static_review(path: Path, chapter: str = CHAPTER) -> list[str]:
    units, notes = read_submission([path])
    assert not notes, notes
    exs = {e.id: (e.name, list(e.forbidden)) for e in exercises(chapter)}
    return inspect_statically([tree for _, tree, _ in units], exs).review


def test_the_student_editions_own_cells_are_not_for_review(tmp_path):
    sub = student_submission(tmp_path)
    text = sub.read_text()
    assert "importlib" in text and "subprocess" in text, "the install cell is not in the student edition"
    assert static_review(sub) == []


def test_machinery_the_student_adds_is_still_listed(tmp_path):
    name = exercises(CHAPTER)[0].name

    def sneak(src: str) -> str:
        return src.replace(f"def {name}(", f"import importlib\n\ndef _sneak():\n    return importlib.import_module('math')\n\n"
                                           f"def {name}(", 1).replace('"""', '"""\n    _sneak()\n    """', 0) \
            if f"def {name}(" in src else src

    def call_it(src: str) -> str:  # the exercise's function calls the helper that imports by name
        tree = ast.parse(src)
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        fn.body.insert(0, ast.parse("_sneak()").body[0])
        return ast.unparse(tree)
    sub = student_submission(tmp_path, edit=lambda s: call_it(sneak(s)) if f"def {name}(" in s else s)
    review = static_review(sub)
    assert any("import importlib" in r for r in review) and any(".import_module" in r for r in review), review


@pytest.mark.slow
def test_a_student_edition_notebook_is_graded_without_a_review_flag(tmp_path, bwrap):
    """The whole grader, in its sandbox, on the hand-in: full marks and no flag on the sheet."""
    from devplace_course.exercises.grading import Plan, flags, grade_folder

    sub = student_submission(tmp_path)
    plan = Plan(exercises(CHAPTER), 2026, timeout=120.0, load_timeout=240.0)
    graded = grade_folder(sub.parent, plan, jobs=1)
    assert len(graded) == 1
    s = graded[0]
    for ex in exercises(CHAPTER):
        assert s.results[ex.id]["status"] == "passed", (ex.id, s.results[ex.id]["message"], s.notes)
    assert s.review == [] and flags(s) == "", flags(s)
