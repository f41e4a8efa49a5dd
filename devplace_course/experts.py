"""The human experts' splits of Tarnawski et al. (2020) against the optimum and the baselines.

Problem: beside six of their layer graphs (BERT-24, GNMT inference and training, Inception-v3
and ResNet-50 inference) the authors publish the split a human expert chose
(``human-experts/*_expert.json``). How much faster is the optimum over pipeline splits (the DP
of chapter 02), how do the baselines the paper compares with fare (PipeDream's planner, a graph
partitioner by recursive bisection in the style of Scotch, local search, the library's rules of
thumb), does a split of any shape (the non-contiguous integer program of chapter 03) beat every
pipeline split, and *why* does the expert lose: which stage is its bottleneck?

Exactness: the DP's value is proven optimal over chains of ideals (``status == "optimal"``
unless ``time_limit`` stops it); the baselines are heuristics and prove nothing; the
non-contiguous IP is anytime: its incumbent is a feasible split, re-scored by the evaluator,
with the solver's proven bound. Every number is the evaluator's (`devplace_lite.evaluate`) on
the placement a method returned, so no method's own bookkeeping is trusted.

Complexity: scoring the expert is ``O(n + m log m)``; the DP is exponential in the graph's
width only (seconds on these layer graphs, `devplace_lite.throughput.dp`); the baselines are polynomial;
the IP runs for at most ``ip_time_limit`` seconds.

Reference: J. Tarnawski, A. Phanishayee, N. Devanur, D. Mahajan, F. Nina Paravecino,
"Efficient Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020 (the
experts' splits: their public repository msr-fiddle/dnn-partitioning, MIT licence).

Example
-------
>>> from devplace_lite.generators import layered
>>> g = layered(12, seed=1)
>>> c = Cluster(accelerators=3)
>>> hand = {v.id: f"acc{min(2, i // 4)}" for i, v in enumerate(g.nodes)}   # four nodes a device
>>> cmp = compare_expert(g, hand, c, baselines=("pipedream", "kl"))
>>> cmp.optimum.status, cmp.speedup >= 1.0, sorted(cmp.baselines)
('optimal', True, ['kl', 'pipedream'])
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from devplace_lite.cost import Evaluation, as_assignment, chain_order, evaluate
from devplace_lite.devices import Cluster
from devplace_lite.graph import Graph
from devplace_lite.io import load_graph, load_placement
from devplace_lite.result import Result
from devplace_lite.solve import partition

#: The baselines of the paper and the library's rules of thumb, by registry name, with what each is.
BASELINES: dict[str, str] = {
    "pipedream": "PipeDream's planner",
    "kl": "recursive bisection (Scotch-style)",
    "local-search": "local search",
    "linear": "best slicing of one order",
    "topo-fill": "topological fill",
    "time": "balance by time",
    "greedy": "greedy fill",
}
#: Relative margin by which the IP must beat the DP to be reported as better (float noise).
IP_MARGIN = 1e-9


@dataclass(frozen=True)
class Workload:
    """One published workload with an expert split: its name, graph file and expert file."""

    name: str
    graph: Path
    expert: Path


def published(reference: str | os.PathLike | None = None) -> list[Workload]:
    """The authors' workloads that come with an expert split, sorted by name.

    Parameters
    ----------
    reference : the folder of the authors' files (holding ``human-experts/`` and
        ``throughput-inputs/``); default `devplace_course.reference.reference_dir` (the
        ``DEVPLACE_REFERENCE`` folder, else ``../shared/reference``).

    Returns
    -------
    list of Workload; empty when the files are not on this machine.

    Examples
    --------
    >>> ws = published()
    >>> ws == [] or all(w.graph.is_file() and w.expert.name.endswith("_expert.json") for w in ws)
    True
    """
    if reference is None:
        from .reference import reference_dir

        reference = reference_dir()
    if reference is None:
        return []
    base = Path(reference)
    out = []
    for expert in sorted((base / "human-experts").glob("*_expert.json")):
        name = expert.name[: -len("_expert.json")]
        graph = base / "throughput-inputs" / "LayerGraphs" / f"{name}.json"
        if graph.is_file():
            out.append(Workload(name, graph, expert))
    return out


@dataclass(frozen=True)
class Bottleneck:
    """The expert's slowest device and what it holds.

    ``stage`` is its position in the pipeline (1-based, of ``stages`` non-empty stages; ``None``
    when the split is no chain of ideals); ``others_mean`` the mean load of the expert's other
    non-empty accelerators; ``idle_cpus`` the CPU cores the expert leaves empty.
    """

    device: str
    stage: int | None
    stages: int
    load: float
    compute: float
    comm: float
    nodes: int
    others_mean: float
    idle_cpus: tuple[str, ...]

    @property
    def imbalance(self) -> float:
        """Load of the bottleneck over the mean of the other accelerators (``inf`` if none)."""
        return self.load / self.others_mean if self.others_mean > 0 else math.inf


def bottleneck(graph: Graph, cluster: Cluster, placement: Mapping[str, str] | Iterable[int]) -> Bottleneck:
    """Describe the slowest device of ``placement`` (see `Bottleneck`).

    Examples
    --------
    >>> from devplace_lite.graph import Node
    >>> g = Graph([Node("a", p_acc=1, comm=0.5), Node("b", p_acc=3)], [("a", "b")])
    >>> b = bottleneck(g, Cluster(accelerators=2, cpus=1), {"a": "acc0", "b": "acc1"})
    >>> b.device, b.stage, b.stages, b.load, b.idle_cpus
    ('acc1', 2, 2, 3.5, ('cpu0',))
    """
    ev = evaluate(graph, cluster, placement)
    loads = ev.loads
    top = ev.devices.index(ev.bottleneck)
    order = chain_order(graph, cluster, placement)
    a = as_assignment(graph, cluster, placement)
    held = [int((a == d).sum()) for d in range(cluster.size)]
    others = [float(loads[d]) for d in range(cluster.k) if d != top and held[d]]
    return Bottleneck(
        device=ev.bottleneck,
        stage=order.index(top) + 1 if order is not None and top in order else None,
        stages=sum(1 for h in held if h),
        load=float(loads[top]), compute=float(ev.compute[top]), comm=float(ev.comm[top]), nodes=held[top],
        others_mean=sum(others) / len(others) if others else 0.0,
        idle_cpus=tuple(ev.devices[d] for d in range(cluster.k, cluster.size) if not held[d]))


@dataclass
class ExpertComparison:
    """The expert's split of one workload against the optimum, the baselines and the IP.

    ``expert``: the evaluator's verdict on the expert's placement; ``optimum``: the DP's
    `Result`; ``baselines``: registry name -> `Result`; ``noncontiguous``: the
    non-contiguous IP's `Result` when it was run (``None`` otherwise).
    """

    name: str
    graph: Graph
    cluster: Cluster
    placement: dict[str, str]
    expert: Evaluation
    optimum: Result
    baselines: dict[str, Result] = field(default_factory=dict)
    noncontiguous: Result | None = None

    @property
    def expert_load(self) -> float:
        return self.expert.max_load

    @property
    def optimum_load(self) -> float:
        """The evaluator's max load of the DP's split (equal to the DP's objective)."""
        return self.optimum.check().max_load

    @property
    def speedup(self) -> float:
        """Expert's max load over the optimum's: how much faster the optimum's pipeline runs."""
        return self.expert_load / self.optimum_load

    def baseline_loads(self) -> dict[str, float]:
        """Registry name -> the evaluator's max load of that baseline's split."""
        return {m: r.check().max_load for m, r in self.baselines.items() if r.assignment is not None}

    @property
    def best_baseline(self) -> tuple[str, float] | None:
        """(name, max load) of the best baseline, ties to the first in `BASELINES` order."""
        loads = self.baseline_loads()
        return min(loads.items(), key=lambda kv: kv[1]) if loads else None

    @property
    def ip_better(self) -> bool:
        """Whether the non-contiguous IP found a feasible split below the DP's optimum."""
        r = self.noncontiguous
        if r is None or r.assignment is None:
            return False
        ev = r.check()
        return ev.feasible and ev.max_load < self.optimum_load * (1 - IP_MARGIN)

    @property
    def bottleneck(self) -> Bottleneck:
        return bottleneck(self.graph, self.cluster, self.placement)

    def why(self) -> str:
        """One sentence on why the expert loses: its bottleneck stage against the optimum."""
        b = self.bottleneck
        where = f"stage {b.stage} of {b.stages}" if b.stage is not None else f"one of {b.stages} parts"
        share = "transfers" if b.comm > b.compute else "compute"
        text = (f"the expert's bottleneck is {where} ({b.device}, {b.nodes} of {self.graph.n} nodes): {b.load:.2f} ms, "
                f"{b.imbalance:.2f}x the mean of its other accelerators and mostly {share}, "
                f"where the optimum's largest load is {self.optimum_load:.2f} ms")
        used = self.optimum.check()
        cpu_work = [float(used.loads[d]) for d in range(self.cluster.k, self.cluster.size)]
        if b.idle_cpus and any(x > 0 for x in cpu_work):
            text += f"; the expert leaves the CPU core idle, the optimum gives it {max(cpu_work):.2f} ms"
        return text

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers for JSON and tables."""
        b = self.bottleneck
        best = self.best_baseline
        out: dict[str, Any] = {
            "workload": self.name, "nodes": self.graph.n, "accelerators": self.cluster.k, "cpus": self.cluster.l,
            "expert": self.expert_load, "expert_feasible": self.expert.feasible, "expert_split": self.expert.split,
            "optimum": self.optimum_load, "optimum_status": self.optimum.status, "speedup": self.speedup,
            "baselines": self.baseline_loads(),
            "best_baseline": None if best is None else {"method": best[0], "load": best[1]},
            "bottleneck": {"device": b.device, "stage": b.stage, "stages": b.stages, "load": b.load,
                           "compute": b.compute, "comm": b.comm, "nodes": b.nodes, "imbalance": b.imbalance,
                           "idle_cpus": list(b.idle_cpus)},
            "why": self.why(),
        }
        r = self.noncontiguous
        if r is not None:
            out["noncontiguous"] = {"load": None if r.assignment is None else r.check().max_load,
                                    "status": r.status, "bound": r.bound, "split": None if r.assignment is None
                                    else r.check().split, "better": self.ip_better}
        return out


def compare_expert(graph: Graph | str | os.PathLike, expert: str | os.PathLike | Mapping[str, str],
                   cluster: Cluster | None = None, *, baselines: Iterable[str] = tuple(BASELINES),
                   ip_time_limit: float | None = None, time_limit: float | None = None, seed: int = 0,
                   name: str | None = None) -> ExpertComparison:
    """Compare an expert's split with the DP's optimum, the baselines and (optionally) the IP.

    Parameters
    ----------
    graph : a `Graph` or a graph file (native or the authors' format).
    expert : the expert's split: a file `devplace_lite.io.load_placement` reads (the authors'
        ``*_expert.json``, a ``--json`` answer, a mapping file) or a node -> device mapping.
    cluster : default the graph file's own (``Cluster.for_graph``).
    baselines : registry names of `devplace_lite.methods.PARTITION` to run beside the DP.
    ip_time_limit : run the non-contiguous IP (``ip-noncontig``) for at most this many seconds;
        ``None``: do not run it.
    time_limit : for the DP and each anytime baseline.
    seed : for randomised methods.
    name : the workload's name (default: the graph's).

    Returns
    -------
    ExpertComparison

    Raises
    ------
    GraphError when the split names unknown nodes or devices or leaves a node unplaced;
    UsageError for an unknown method name.
    """
    g = graph if isinstance(graph, Graph) else load_graph(graph)
    c = cluster if cluster is not None else Cluster.for_graph(g)
    placement = dict(expert) if isinstance(expert, Mapping) else load_placement(expert, g, c)
    ev = evaluate(g, c, placement)
    opt = partition(g, c, "dp", time_limit=time_limit, seed=seed)
    # the DP's optimum is each baseline's certificate already: no best bound (a DP again) per baseline
    runs = {m: partition(g, c, m, time_limit=time_limit, seed=seed, certify=False) for m in baselines}
    ip = partition(g, c, "ip-noncontig", time_limit=ip_time_limit, seed=seed) if ip_time_limit is not None else None
    return ExpertComparison(name or g.name, g, c, placement, ev, opt, runs, ip)
