"""Exercise of chapter 00 (the preface): a warm-up that shows how checks work."""

from __future__ import annotations

import numpy as np

from devplace_lite.generators import FAMILIES, generate
from devplace_lite.graph import Graph
from .core import Case, close, register


def total_work(graph: Graph) -> float:
    """Sum of the accelerator times of all operators (ms)."""
    return float(graph.p_acc.sum())


def _cases(rng: np.random.Generator, i: int) -> Case:
    family = str(rng.choice(sorted(FAMILIES)))
    n, seed, training = int(rng.integers(3, 40)), int(rng.integers(0, 1000)), bool(rng.random() < 0.7)
    g = generate(family, n, seed=seed, training=training)
    return Case((g,), text=f"graph = generate({family!r}, {n}, seed={seed}, training={training})")


def _slips(case: Case) -> list:
    g = case.args[0]
    return [(float(np.nansum(g.p_cpu)), "that is the total CPU time (p_cpu); the exercise asks for accelerator time (p_acc)"),
            (float(g.p_acc[~g.backward].sum()), "backward operators count too: sum over all nodes, forward and backward")]


register(id="00.1", name="my_total_work", title="total accelerator work of a graph", reference=total_work,
         cases=_cases, compare=close(rtol=1e-9), slips=_slips, n=10,
         hint="loop over graph.nodes and add up v.p_acc (or use the array graph.p_acc)")
