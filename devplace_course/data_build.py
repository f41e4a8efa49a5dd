"""Regenerate ``data/graphs/`` byte for byte: ``python -m devplace_course.data_build data/graphs``.

The files are the project's own workloads (``make data`` runs this module):

* roofline graphs of every zoo model at full size (`devplace_lite.zoo`), profiled with
  `devplace_lite.pipeline.profile.profile` for `SPEC` at batch `BATCH`: layer granularity for all
  five, inference and training; operator granularity for ResNet-50 and BERT as well;
* a few seeded graphs of each `devplace_lite.generators` family, inference and training.

Everything is deterministic: the zoo models are built on the meta device (shapes only), the
profiler's times are a roofline of documented constants rounded to six significant digits,
and the generators are seeded, so two runs, on any machine with the pinned torch, write
identical bytes (`tests/test_zoo_profile.py` checks it). Measured profiles are not made
here: they depend on the machine (see ``data/README.md``).

Example
-------
>>> from devplace_course.data_build import plan
>>> len(plan()) > 20
True
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from devplace_lite.errors import DevplaceError, GraphError
from devplace_lite.graph import Graph
from .checkout import find_checkout

#: The checkout's data/graphs folder (None outside a checkout: then pass a folder to `build`).
DATA_DIR = root / "data" / "graphs" if (root := find_checkout()) else None
SPEC = "V100"
BATCH = 8
COMMAND = "python -m devplace_course.data_build data/graphs"

ZOO_LAYER = ("resnet50", "inception", "bert", "gnmt", "gpt")
ZOO_OP = ("resnet50", "bert")
GENERATED = (("layered", 40, 0), ("series_parallel", 40, 0), ("skip_chain", 40, 0), ("cells", 40, 0),
             ("random", 20, 0))


def _zoo(model: str, granularity: str, training: bool) -> Callable[[], Graph]:
    def make() -> Graph:
        from devplace_lite.pipeline.profile import profile
        from devplace_lite.zoo import MODELS

        entry = MODELS[model]
        net = entry.build("full", device="meta")
        g = profile(net, entry.example_input("full", BATCH), granularity=granularity, spec=SPEC,
                    training=training, progress=False, name=model, config={"size": "full", **entry.config("full")})
        g.meta["made_by"] = COMMAND
        return g
    return make


def _generated(family: str, n: int, seed: int, training: bool) -> Callable[[], Graph]:
    def make() -> Graph:
        from devplace_lite.generators import generate

        g = generate(family, n, seed=seed, training=training)
        g.meta["made_by"] = COMMAND
        return g
    return make


def plan() -> list[tuple[str, Callable[[], Graph]]]:
    """``(file name, builder)`` for every file of data/graphs, in a fixed order."""
    out: list[tuple[str, Callable[[], Graph]]] = []
    for granularity, models in (("layer", ZOO_LAYER), ("op", ZOO_OP)):
        for model in models:
            for training in (False, True):
                kind = "training" if training else "inference"
                out.append((f"{model}_{granularity}_{kind}.json", _zoo(model, granularity, training)))
    for family, n, seed in GENERATED:
        for training in (False, True):
            kind = "training" if training else "inference"
            out.append((f"gen_{family}_{n}_s{seed}_{kind}.json", _generated(family, n, seed, training)))
    return out


def build(outdir: str | Path, only: Sequence[str] | None = None, verbose: bool = False) -> list[Path]:
    """Write the planned files (or those named in ``only``) into ``outdir``; returns their paths."""
    from devplace_lite.io import save_graph

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    items = plan()
    if only is not None:
        known = {name for name, _ in items}
        missing = sorted(set(only) - known)
        if missing:
            raise GraphError(f"not a data file: {', '.join(missing)}")
        items = [(name, make) for name, make in items if name in set(only)]
    written = []
    for name, make in items:
        t0 = time.perf_counter()
        g = make()
        save_graph(g, out / name)
        written.append(out / name)
        if verbose:
            print(f"{name:42s} {g.n:5d} nodes {g.m:5d} edges  {time.perf_counter() - t0:5.1f} s", file=sys.stderr)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devplace_course.data_build", description=__doc__.split("\n")[0])
    p.add_argument("outdir", nargs="?", default="data/graphs")
    p.add_argument("--only", nargs="+", help="write only these file names")
    args = p.parse_args(argv)
    try:
        build(args.outdir, args.only, verbose=True)
    except DevplaceError as e:
        print(f"data_build: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
