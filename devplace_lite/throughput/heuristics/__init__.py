"""Heuristics at compiler speed (chapter 06): placements in a fraction of a second, no solver.

Methods (each ``f(graph, cluster, *, time_limit=None, seed=0) -> Result``, registered in
`devplace_lite.methods.PARTITION` under the name in brackets; every objective is the
evaluator's max load of the returned placement):

* `kl` [``kl``]: recursive bisection along a topological order with Fiduccia-Mattheyses
  refinement, a CPU core offered the cheap ends of the pipeline, then local search; a chain
  of ideals (a pipeline);
* `topo_fill` [``topo-fill``]: one pass in topological order filling each accelerator towards
  an equal share under its memory cap; a chain;
* `etf` [``etf``], `heft` [``heft``]: list schedulers that minimise one sample's schedule
  length, scored under the throughput model; splits of any kind;
* `local_search_method` [``local-search``]: `local_search` from the `balance_by_time` cut;
  `local_search(graph, cluster, start)` improves any placement and keeps its split kind.

Building blocks: `blocks` (what may move, and the order constraints), `incremental` (loads
updated per move), `intervals` (loads of every interval of an order at once).
"""

from .bisection import kl
from .list_scheduling import etf, heft
from .local_search import local_search, local_search_method
from .topo_fill import topo_fill

__all__ = ["kl", "etf", "heft", "local_search", "local_search_method", "topo_fill"]
