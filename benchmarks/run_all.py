"""Run every benchmark (`make bench`): each `benchmarks/<area>/run.py` writes its results.json and
README table. Benchmarks measure; they never assert on time."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    areas = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if (here / m.name / "run.py").exists())
    wanted = sys.argv[1:] or areas
    unknown = set(wanted) - set(areas)
    if unknown:
        print(f"run_all: no benchmark area {', '.join(sorted(unknown))} (have: {', '.join(areas)})", file=sys.stderr)
        return 2
    for area in wanted:
        print(f"== benchmarks/{area}", flush=True)
        sys.argv = [f"benchmarks/{area}/run.py"]  # each area parses its own options: give it none
        importlib.import_module(f"benchmarks.{area}.run").main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
