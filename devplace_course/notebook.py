"""What every chapter opens with, how it shows a table, and the cell a hosted notebook adds.

A chapter's first code cell is one line::

    import devplace_lite as dl, devplace_course.notebook as nb; FAST, rng = nb.start()

`start` applies the book's figure style and returns ``FAST`` (``DEVPLACE_FAST=1``: the
small sizes CI runs) and a generator seeded for the chapter. `zoo_graph` reads a graph of the
checkout's ``data/graphs`` (rebuilt into ``./zoo-graphs`` outside a checkout), and `table`
shows a results table as a styled pandas table, units in its headers.

The source chapters carry no install cell: the notebooks that leave the checkout (the executed
ones the book publishes, the student edition's) get one in front, by `with_install_cell`, so
that Colab and Binder, which open them with nothing installed, install the library first.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from devplace_lite.graph import Graph

if TYPE_CHECKING:
    import pandas as pd

#: What a hosted notebook installs when no repository is known: the package index's release.
DEFAULT_TARGET = "devplace_lite[torch]"
#: The install cell's line that names what to install (`with_install_cell` writes it).
INSTALL_LINE = re.compile(r'^INSTALL_FROM = .*$', re.M)
_INSTALL_CELL = """\
# On a hosted notebook (Colab, Binder) where the library or its course is missing, install them
# (one distribution); elsewhere this cell does nothing.
import importlib.util, subprocess, sys
INSTALL_FROM = {target}
if importlib.util.find_spec("devplace_lite") is None or importlib.util.find_spec("devplace_course") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", INSTALL_FROM], check=True)"""


def start(seed: int = 0) -> tuple[bool, np.random.Generator]:
    """The book's figure style on; returns ``(FAST, rng)``.

    Examples
    --------
    >>> fast, rng = start(seed=1)
    >>> isinstance(fast, bool), bool(rng.integers(10) == np.random.default_rng(1).integers(10))
    (True, True)
    """
    from devplace_lite import plot

    plot.use_style()
    return os.environ.get("DEVPLACE_FAST") == "1", np.random.default_rng(seed)


def zoo_graph(name: str) -> Graph:
    """The graph ``name`` of the checkout's ``data/graphs`` (``"bert_training"``, ...), or,
    outside a checkout, rebuilt into ``./zoo-graphs`` first (this needs torch).

    Raises
    ------
    GraphError
        When ``name`` is not one of the data files.
    """
    from devplace_lite.io import load_graph
    from .data_build import DATA_DIR, build

    folder = DATA_DIR if DATA_DIR is not None and DATA_DIR.is_dir() else Path("zoo-graphs")
    path = folder / f"{name}.json"
    if not path.exists():
        build(folder, only=[path.name])
    return load_graph(path)


def find_up(relative: str) -> Path | None:
    """The first path ``relative`` under the working directory or a folder above it (a
    checkout's ``benchmarks/.../results.json`` from its chapters), or None.

    Examples
    --------
    >>> find_up("no/such/file") is None
    True
    """
    here = Path.cwd().resolve()
    return next((p / relative for p in [here, *here.parents] if (p / relative).exists()), None)


def _cell(x: Any, digits: int) -> Any:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (float, np.floating)):
        return f"{x:.{digits}g}" if abs(x) < 10 ** digits else f"{x:,.0f}"
    if isinstance(x, (int, np.integer)) and abs(x) >= 10_000:
        return f"{x:,}"
    return x


def table(rows: "pd.DataFrame | Sequence[Mapping[str, Any]]", digits: int = 3, index: bool = False,
          formats: Mapping[str, str] | None = None, caption: str | None = None,
          widths: Sequence[float] | None = None) -> "pd.io.formats.style.Styler":
    """A results table to show: ``rows`` (a DataFrame, or one mapping per row, headers with
    their units such as ``"max-load (ms)"``) with floats to ``digits`` significant digits (a
    float of more integer digits whole, thousands separated), missing values as a dash, truth
    values as yes / no, numbers right-aligned and text left-aligned, and the index hidden
    unless ``index``.
    ``formats`` maps a column to a format of its own (``{"gap": "{:.1%}"}``); ``caption``
    says what every cell is when the headers cannot (``"max-load / best baseline"``);
    ``widths`` (percent of the column, one per table column) sets a table of sentences in
    left-aligned columns of those widths, wrapping within each.

    The book's stylesheet fits the table to the text column (``chapters/_static``: the class
    ``dataframe``, as pandas' own tables have).

    Examples
    --------
    >>> t = table([{"method": "dp", "max-load (ms)": 12.3456}, {"method": "kl", "max-load (ms)": float("nan")}])
    >>> t.data.shape, "12.3<" in t.to_html(), "–<" in t.to_html()
    ((2, 2), True, True)
    >>> "12.35%" in table([{"gap": 0.12345}], formats={"gap": "{:.2%}"}).to_html()
    True
    >>> "did not finish<" in table([{"ms": 1.5}, {"ms": "did not finish"}], formats={"ms": "{:.3f}"}).to_html()
    True
    >>> t = table([{"graph": "bert", "ideals": 12}, {"graph": "gpt", "ideals": "(full mode)"}])
    >>> [(st["selector"], st["props"]) for st in t.table_styles]   # text left, numbers (and their notes) right
    [('th.col0', [('text-align', 'left')])]
    """
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    formats = dict(formats or {})
    style = df.style.format(lambda x: _cell(x, digits))
    if formats:
        # a column's format is for its numbers; a note among them ("did not finish") reads as written
        style = style.format({c: (lambda f: lambda x: "–" if x is None or x != x else
                                  f.format(x) if isinstance(x, (int, float, np.number)) else str(x))(f)
                              for c, f in formats.items()})
    style = style.set_table_attributes('class="dataframe devplace-table"')
    if caption:
        style = style.set_caption(caption)
    # a column of numbers (a placeholder such as "(full mode)" among them included) lines up on the right
    numeric = [c for c in df.columns if any(isinstance(x, (int, float, np.number)) and not isinstance(x, (bool, np.bool_))
                                            and x == x for x in df[c])]
    text = [c for c in df.columns if c not in numeric]
    style = style.set_properties(subset=numeric, **{"text-align": "right"})
    style = style.set_properties(subset=text, **{"text-align": "left"})  # names read from the left, numbers line up
    style = style.set_table_styles([{"selector": f"th.col{i}", "props": "text-align: left"}
                                    for i, c in enumerate(df.columns) if c in text])
    if widths is not None:
        style = style.set_properties(**{"text-align": "left", "vertical-align": "top"}).set_table_styles(
            [{"selector": f"th.col{i}", "props": f"width: {w}%; text-align: left"} for i, w in enumerate(widths)],
            overwrite=False)
    return style if index else style.hide(axis="index")


def install_cell(target: str = DEFAULT_TARGET):
    """The hosted notebook's install cell (folded: tagged ``hide-cell``), installing ``target``.

    Examples
    --------
    >>> c = install_cell("devplace_lite @ git+https://example.org/x@v1")
    >>> 'INSTALL_FROM = "devplace_lite @ git+https://example.org/x@v1"' in c.source, c.metadata["tags"]
    (True, ['hide-cell'])
    """
    import nbformat

    return nbformat.v4.new_code_cell(_INSTALL_CELL.format(target=json.dumps(target)), metadata={"tags": ["hide-cell"]})


def with_install_cell(nb, target: str = DEFAULT_TARGET):
    """``nb`` with the install cell of ``target`` in front of its first code cell, where the
    chapter's introduction ends (an install cell already there is replaced: stamping twice
    leaves one); returns the cell."""
    cell = install_cell(target)
    first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    if first < len(nb.cells) and INSTALL_LINE.search(nb.cells[first].source):
        nb.cells[first] = cell
    else:
        nb.cells.insert(first, cell)
    return cell
