"""Where backward nodes without a forward partner go: the one attachment rule of the library.

A split moves colocation classes (`Graph.units`) as one, and a class that holds a forward node
goes where the split puts that node. A *backward-only* class (backward nodes only, or one
classless backward node; the authors' BERT operator training graphs have some) is placed by no
forward node, so the methods that move forward units (the baselines, the block heuristics,
the DP over ideals) attach it to one with `host_units`:

* each backward-only class joins the unit of the neighbour it exchanges the most data with,
  by any edge of any of its nodes (an edge's weight is its producer's ``comm``; ties to the
  lowest neighbour index), the class as one group;
* classes are resolved in rounds, in order of their lowest node index, each seeing the
  attachments made before it, so chains of such classes follow their first anchored neighbour;
* a class with no anchored neighbour left joins the unit of the first forward node in
  topological order.

Methods that search over every placement (`devplace_lite.exhaustive`, the MIPs, the bounds of
`devplace_lite.bounds`) keep such classes free instead: the attachment may cost a little.

Complexity: ``O(r (n + m))`` for ``r`` rounds (at most the number of backward-only classes).

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> g = Graph([Node("a", comm=0.1), Node("b", comm=5.0), Node("x", backward=True)],
...           [("a", "b"), ("a", "x"), ("b", "x")])
>>> host_units(g).tolist()  # x is attached to b, which sends it 5.0
[0, 1, 1]
"""

from __future__ import annotations

import numpy as np

from .graph import Graph


def host_units(graph: Graph) -> np.ndarray:
    """For each node, the unit (an index of ``graph.units``) whose device it shares.

    A node of a class holding a forward node gets its own unit; a node of a backward-only class
    the unit the rule of the module docstring names. A graph without forward nodes keeps
    ``graph.units``.
    """
    units = graph.units
    fwd = ~graph.backward
    if not fwd.any():
        return units.copy()
    anchored = np.zeros(int(units.max()) + 1, dtype=bool)
    anchored[units[fwd]] = True
    host = np.where(anchored[units], units, -1)
    groups: dict[int, list[int]] = {}
    for b in np.flatnonzero(host < 0).tolist():
        groups.setdefault(int(units[b]), []).append(b)
    left = sorted(groups.values())
    while left:
        waiting = []
        for group in left:
            best = None  # ((weight, -neighbour index), neighbour)
            for b in group:
                for p in graph.pred[b]:
                    if host[p] >= 0:
                        cand = ((graph.comm[p], -p), p)
                        best = cand if best is None else max(best, cand)
                for q in graph.succ[b]:
                    if host[q] >= 0:
                        cand = ((graph.comm[b], -q), q)
                        best = cand if best is None else max(best, cand)
            if best is None:
                waiting.append(group)
            else:
                host[group] = host[best[1]]
        if len(waiting) == len(left):  # no anchored neighbour anywhere: join the first forward unit
            order = graph.topological_order()
            first = int(units[order[fwd[order]][0]])
            for group in waiting:
                host[group] = first
            waiting = []
        left = waiting
    return host
