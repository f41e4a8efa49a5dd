"""The student edition: the chapters with their solutions taken out and their checks kept.

In a chapter, a solution is a cell tagged ``solution``. In the student edition

* a code cell tagged ``solution`` becomes a *stub cell*: its imports, and each function it
  defines with the same signature and docstring but a body that raises ``NotImplementedError``
  (so the check after it reports "not attempted" and the notebook runs on);
* a solution cell that defines no function (a worked answer, an assert on the solution's
  result, a markdown answer) is dropped, except what of a markdown one follows its first heading
  (`chapter_text`): jupytext ends a markdown cell only at the next ``+++`` or code cell, so an
  answer sketch just before ``## Summary`` carries the chapter's closing sections in its cell;
* every other cell, checks included, is kept as it is.

Usage (``make student``)::

    python -m devplace_course.student [CHAPTERS_DIR] [OUT_DIR]     # defaults: chapters build/student

writes ``OUT_DIR/chapters/`` (MyST ``.md`` notebooks, plus the book's other pages and
configuration, so ``jupyter-book build OUT_DIR/chapters`` gives a student book) and
``OUT_DIR/notebooks/`` (the same chapters as ``.ipynb``, to hand out or open in Colab: these
carry the install cell in front, `devplace_course.notebook.with_install_cell`).
Needs jupytext (the ``book`` or ``test`` extra).
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from pathlib import Path

from .notebook import with_install_cell

SOLUTION = "solution"
CHAPTER_GLOB = "[0-9][0-9]_*.md"
#: Files of the chapters folder copied as they are (the book's non-notebook pages, configuration and
#: static files).
PAGES = ("_config.yml", "_toc.yml", "*.bib", "notation.md", "bibliography.md", "genindex.md", "_static")


def _exercise_names() -> dict[str, str]:
    from .exercises import exercises

    return {e.name: e.id for e in exercises()}


def stub_source(source: str, names: dict[str, str] | None = None) -> str | None:
    """The stub of a solution cell, or ``None`` when the cell defines no function.

    ``names`` maps function names to exercise ids, for the comment that says what to write.
    """
    names = _exercise_names() if names is None else names
    tree = ast.parse(source)
    lines = source.splitlines()
    imports, stubs, defined = [], [], []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append("\n".join(lines[node.lineno - 1: node.end_lineno]))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.append(node.name)
            ex_id = names.get(node.name)
            message = f"exercise {ex_id}: write {node.name}" if ex_id else f"write {node.name}"
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            body = node.body
            doc = ast.get_docstring(node, clean=False) is not None
            if body[0].lineno > node.lineno:  # the usual layout: keep the header (and docstring) as written
                keep_to = body[0].end_lineno if doc else body[0].lineno - 1
                while not doc and keep_to > node.lineno and lines[keep_to - 1].strip()[:1] in ("#", ""):
                    keep_to -= 1  # comments above the first statement belong to the solution
                indent = " " * body[0].col_offset
                stub = "\n".join(lines[first - 1: keep_to]) + f"\n{indent}raise NotImplementedError({message!r})"
            else:  # a one-line def: rebuild it
                node.body = (body[:1] if doc else []) + [ast.parse(f"raise NotImplementedError({message!r})").body[0]]
                stub = ast.unparse(node)
            stubs.append(stub)
    if not defined:
        return None
    ids = sorted({names[n] for n in defined if n in names})
    what = ", ".join(defined)
    head = (f"# Exercise {', '.join(ids)}: write {what} here, then run the check below."
            if ids else f"# Write {what} here.")
    return "\n\n".join([head + ("\n" + "\n".join(imports) if imports else "")] + stubs) + "\n"


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}|:{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")


def chapter_text(markdown: str) -> str:
    r"""What of a markdown solution cell is the chapter's own: the text from its first heading
    outside a fenced block (an answer sketch's admonition is one) on, or ``""``.

    Parameters
    ----------
    markdown : str
        The source of a markdown cell tagged ``solution``.

    Returns
    -------
    str
        The lines from that heading on, as written; ``""`` when the cell has none.

    Examples
    --------
    >>> chapter_text("```{admonition} A sketch\n# not a heading here\n```\n\n## Summary\n* kept")
    '## Summary\n* kept'
    >>> chapter_text("The answer is 42.")
    ''
    """
    lines = markdown.splitlines()
    fence = None  # the opening run of the fenced block we are in (a longer one nests shorter ones)
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
            elif _HEADING.match(line):
                return "\n".join(lines[i:])
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
            fence = None
    return ""


def student_notebook(nb, names: dict[str, str] | None = None):
    """A copy of a notebook (nbformat node) with its solutions replaced or removed; returns
    ``(notebook, stubs, dropped)``."""
    import copy

    names = _exercise_names() if names is None else names
    out = copy.deepcopy(nb)
    cells, stubs, dropped = [], 0, 0
    for cell in out.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if SOLUTION not in tags:
            cells.append(cell)
            continue
        stub = stub_source(cell.source, names) if cell.cell_type == "code" else None
        if stub is None:
            dropped += 1
            rest = chapter_text(cell.source) if cell.cell_type == "markdown" else ""
            if rest:
                cell.source = rest
                cell.metadata = {k: v for k, v in cell.metadata.items() if k != "tags"}
                cells.append(cell)
            continue
        cell.source = stub
        cell.metadata = {}
        cell.outputs, cell.execution_count = [], None
        cells.append(cell)
        stubs += 1
    out.cells = cells
    return out, stubs, dropped


def make_student(chapters: Path, out: Path) -> list[tuple[str, int, int]]:
    """Write the student edition of ``chapters`` into ``out``; (chapter, stubs, dropped) per chapter."""
    import jupytext

    chapters, out = Path(chapters), Path(out)
    sources = sorted(chapters.glob(CHAPTER_GLOB))
    if not sources:
        raise FileNotFoundError(f"no chapters ({CHAPTER_GLOB}) in {chapters}")
    names = _exercise_names()
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "chapters").mkdir(parents=True)
    (staging / "notebooks").mkdir()
    report = []
    for src in sources:
        nb = jupytext.read(src)
        student, stubs, dropped = student_notebook(nb, names)
        jupytext.write(student, staging / "chapters" / src.name, fmt="md:myst")
        with_install_cell(student)  # the handed-out notebook may be opened where nothing is installed
        jupytext.write(student, staging / "notebooks" / (src.stem + ".ipynb"), fmt="ipynb")
        report.append((src.stem, stubs, dropped))
    for pattern in PAGES:
        for page in chapters.glob(pattern):
            if page.is_dir():
                shutil.copytree(page, staging / "chapters" / page.name)
            else:
                shutil.copy2(page, staging / "chapters" / page.name)
    shutil.rmtree(out, ignore_errors=True)  # replace the old edition whole: nothing half-written
    staging.rename(out)
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chapters = Path(argv[0]) if argv else Path("chapters")
    out = Path(argv[1]) if len(argv) > 1 else Path("build/student")
    try:
        report = make_student(chapters, out)
    except (FileNotFoundError, SyntaxError) as e:
        print(f"make_student: error: {e}", file=sys.stderr)
        return 2
    for name, stubs, dropped in report:
        print(f"{name}: {stubs} solution cell(s) stubbed, {dropped} removed")
    print(f"student edition in {out}/chapters (MyST) and {out}/notebooks (.ipynb)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
