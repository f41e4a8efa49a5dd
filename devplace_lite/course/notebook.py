"""What every chapter opens with, and how it shows a table: one line, one function.

A chapter's first code cell is::

    import devplace_lite as dl; from devplace_lite.course import notebook as nb; FAST, rng = nb.start()

`start` applies the book's figure style and returns ``FAST`` (``DEVPLACE_FAST=1``: the
small sizes CI runs) and a generator seeded for the chapter. `zoo_graph` reads a graph of the
checkout's ``data/graphs`` (rebuilt into ``./zoo-graphs`` outside a checkout), and `table`
shows a results table as a styled pandas table, units in its headers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..graph import Graph

if TYPE_CHECKING:
    import pandas as pd


def start(seed: int = 0) -> tuple[bool, np.random.Generator]:
    """The book's figure style on; returns ``(FAST, rng)``.

    Examples
    --------
    >>> fast, rng = start(seed=1)
    >>> isinstance(fast, bool), bool(rng.integers(10) == np.random.default_rng(1).integers(10))
    (True, True)
    """
    from .. import plot

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
    from ..io import load_graph
    from .data_build import DATA_DIR, build

    folder = DATA_DIR if DATA_DIR is not None and DATA_DIR.is_dir() else Path("zoo-graphs")
    path = folder / f"{name}.json"
    if not path.exists():
        build(folder, only=[path.name])
    return load_graph(path)


def table(rows: "pd.DataFrame | Sequence[Mapping[str, Any]]", digits: int = 3, index: bool = False) -> "pd.io.formats.style.Styler":
    """A results table to show: ``rows`` (a DataFrame, or one mapping per row, headers with
    their units such as ``"max-load (ms)"``) with floats to ``digits`` significant digits,
    numbers right-aligned, and the index hidden unless ``index``.

    Examples
    --------
    >>> t = table([{"method": "dp", "max-load (ms)": 12.3456}, {"method": "kl", "max-load (ms)": 13.0}])
    >>> t.data.shape
    (2, 2)
    """
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    style = df.style.format(lambda x: f"{x:.{digits}g}" if isinstance(x, float) else x)
    style = style.set_table_attributes('class="dataframe devplace-table"')
    numeric = df.select_dtypes("number").columns
    style = style.set_properties(subset=list(numeric), **{"text-align": "right"})
    return style if index else style.hide(axis="index")
