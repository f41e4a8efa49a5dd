"""What the per-model benchmarks share: one row per model (a failure is a row too), a partial
run that updates only its own rows, and the results written as ``results.json`` beside the
benchmark and a table between ``<!-- table -->`` and ``<!-- end -->`` in its ``README.md``."""

from __future__ import annotations

import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence


def rows_of(names: Sequence[str], case: Callable[[str], dict[str, Any]], families: Mapping[str, str]) -> list[dict]:
    """``case(name)`` of every model, in order; a model that fails is a row with its error's first line."""
    rows = []
    for name in names:
        print(f"-- {name}", flush=True)
        try:
            rows.append(case(name))
        except Exception as e:  # noqa: BLE001 - a failure is a result: one line in the table
            rows.append({"model": name, "family": families.get(name, "?"), "error": str(e).splitlines()[0]})
        print(json.dumps(rows[-1], default=str)[:400], flush=True)
    return rows


def record(here: Path, module: str, argv: Sequence[str] | None, everyone: Sequence[str], rows: list[dict],
           table: Callable[[list[dict]], str]) -> None:
    """Write ``results.json`` and the README's table in ``here``: a run of fewer models than
    ``everyone`` keeps the other models' rows of the last run."""
    import torch

    from devplace_lite.pipeline.resources import device_name

    results = here / "results.json"
    if results.exists() and {r["model"] for r in rows} != set(everyone):
        kept = {r["model"]: r for r in json.loads(results.read_text())["rows"]}
        kept.update({r["model"]: r for r in rows})
        rows = [kept[m] for m in everyone if m in kept]
    command = f"python -m {module} " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    result = {"device": device_name("cpu"), "torch": torch.__version__, "python": platform.python_version(),
              "date": time.strftime("%Y-%m-%d"), "command": command.strip(), "rows": rows}
    results.write_text(json.dumps(result, indent=1, default=str) + "\n")
    readme = here / "README.md"
    marker, end = "<!-- table -->", "<!-- end -->"
    text = readme.read_text() if readme.exists() else f"{marker}\n{end}\n"
    head, _, rest = text.partition(marker)
    _, _, tail = rest.partition(end)
    loads = ", ".join(f"{r['model']} {r.get('load_before', '?')}" for r in rows)
    readme.write_text(f"{head}{marker}\n{table(rows)}\n\nMachine: {result['device']}, shared with other work; "
                      f"load average (1, 5, 15 min) before each model: {loads}. torch {result['torch']}; "
                      f"command: `{result['command']}`; {result['date']}.\n{end}{tail}")
