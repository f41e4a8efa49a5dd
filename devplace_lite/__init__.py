"""devplace_lite: place the operators of a DNN graph on devices (the library behind the book).

The public surface, importable without torch:

* `load_graph` (a native or the authors' JSON file), `Graph`, `Node`: the graph model;
* `Cluster`: ``k`` accelerators with a memory cap and ``l`` CPU cores;
* `evaluate`: score any placement under the one cost model;
* `partition`: run a registered method (`devplace_lite.methods.PARTITION`: ``dp``, ``ip``,
  ``brkga``, ...) and get a certified `Result` (placement, objective, proven bound, status);
* `latency`: the same for one sample's latency (`devplace_lite.methods.LATENCY`);
* `bound`: a proven lower bound on the optimal max-load (`devplace_lite.methods.BOUND`);
* the errors (`DevplaceError` and its kinds), raised for every bad input;
* `plan`: from a PyTorch model to a certified pipeline plan (imports torch when called);
* `parallelize`: data, tensor and pipeline parallelism planned together (Piper's model);
* `generators` (seeded graphs of four families: ``dl.generators.generate("layered", 40)``) and
  `plot` (the book's figures: placements coloured by device, Gantt charts), loaded on first use.

Example
-------
>>> import devplace_lite as dl
>>> from devplace_lite.generators import layered
>>> g = layered(12, seed=3)
>>> r = dl.partition(g, dl.Cluster(accelerators=3), method="dp")
>>> r.status, r.objective == dl.evaluate(g, r.cluster, r.placement).max_load
('optimal', True)
>>> dl.bound(g, dl.Cluster(accelerators=3), method="combinatorial").bound <= r.objective
True
"""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING, Any, Sequence

from .cost import Evaluation, evaluate
from .devices import Cluster
from .errors import ClusterError, DevplaceError, GraphError, LimitError, UsageError
from .graph import Graph, Node
from .io import load_graph
from . import solve
from .methods import BOUND, LATENCY, PARTITION
from .result import Result
from .solve import BOUND_TIME, LATENCY_BOUND_TIME

if TYPE_CHECKING:  # the bounds (and numba) load only when a bound is asked for
    from .result import Bound

__all__ = ["BOUND", "Cluster", "ClusterError", "DevplaceError", "Evaluation", "Graph", "GraphError", "LATENCY",
           "LimitError", "Node", "PARTITION", "Result", "UsageError", "bound", "evaluate", "generators", "latency",
           "load_graph", "parallelize", "partition", "plan", "plot"]


def __getattr__(name: str) -> Any:
    """`generators` and `plot` load on first use: a command that needs neither never pays for them."""
    if name in ("generators", "plot"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _inputs(graph: Graph | str | PathLike, cluster: Cluster | None) -> tuple[Graph, Cluster]:
    g = graph if isinstance(graph, Graph) else load_graph(graph)
    return g, cluster if cluster is not None else Cluster.for_graph(g)


def partition(graph: Graph | str | PathLike, cluster: Cluster | None = None, method: str = "dp", *,
              time_limit: float | None = None, bound_time: float = BOUND_TIME, certify: bool = True,
              seed: int = 0) -> Result:
    """Minimise the largest device load of ``graph`` on ``cluster`` with a registered method,
    and certify the answer: what ``devplace partition`` answers.

    Parameters
    ----------
    graph : a `Graph`, or the path of a graph file (native or the authors' JSON).
    cluster : the devices; default: the file's own (``Cluster.for_graph``).
    method : a name of `devplace_lite.methods.PARTITION` (its entry says what the method
        searches, whether it is exact, how it treats ``time_limit`` and what certifies it).
    time_limit : wall seconds for the whole call, method and certificate; an anytime method
        returns its incumbent, bound and status when they run out.
    bound_time : seconds at most for the certifying bound (`devplace_lite.solve`).
    certify : False: the method's raw answer, without a certificate.
    seed : for the methods that draw random numbers.

    Returns
    -------
    Result: ``bound`` is a proven lower bound on the optimum of the splits the method searches,
    and ``status`` is ``optimal`` whenever that bound meets the objective.

    Raises
    ------
    UsageError for an unknown method, GraphError / ClusterError for bad input, LimitError when
    the graph is too large for the method.
    """
    g, c = _inputs(graph, cluster)
    return solve.partition(g, c, method, time_limit=time_limit, bound_time=bound_time, certify=certify, seed=seed)


def latency(graph: Graph | str | PathLike, cluster: Cluster | None = None, method: str = "ip", *,
            time_limit: float | None = None, bound_time: float = LATENCY_BOUND_TIME, certify: bool = True,
            seed: int = 0) -> Result:
    """Minimise one sample's latency (inference) with a method of
    `devplace_lite.methods.LATENCY`, certified by the latency bounds: what ``devplace latency``
    answers. Parameters, returns and errors as for `partition`.

    >>> import devplace_lite as dl
    >>> from devplace_lite.generators import layered
    >>> r = dl.latency(layered(10, seed=1), dl.Cluster(accelerators=2, cpus=1), "greedy")
    >>> r.bound <= r.objective
    True
    """
    g, c = _inputs(graph, cluster)
    return solve.latency(g, c, method, time_limit=time_limit, bound_time=bound_time, certify=certify, seed=seed)


def bound(graph: Graph | str | PathLike, cluster: Cluster | None = None, method: str = "best", *,
          time_limit: float | None = None) -> "Bound":
    """A proven lower bound on the optimal largest device load (`devplace_lite.methods.BOUND`):
    what ``devplace bound`` answers. ``time_limit`` is the whole call's wall time (a method
    still running then answers with what its finished steps proved).

    Parameters and errors as for `partition`; returns a `Bound` (value, status, the optimum it
    bounds).
    """
    g, c = _inputs(graph, cluster)
    return solve.bound(g, c, method, time_limit=time_limit)


def parallelize(model: Any, devices: int | None = None, memory: float | None = None, microbatches: int | None = None,
                bandwidth: float | None = None, method: str = "exact", time_limit: float | None = None,
                spec: str | None = None):
    """Data, tensor and pipeline parallelism planned together under Piper's model, within the
    whole call's ``time_limit``: what ``devplace parallelize`` answers (`devplace_lite.solve.parallelize`:
    parameters, returns and errors there)."""
    return solve.parallelize(model, devices, memory, microbatches, bandwidth, method, time_limit=time_limit, spec=spec)


def plan(model: Any, example_inputs: Sequence[Any], **options: Any):
    """Plan ``model`` for ``k`` pipeline ranks, or for ``devices`` devices with its data, tensor
    and pipeline degrees chosen together: capture, measure, exact split, proven bound, stage memory.

    ``example_inputs`` is one step's batch. Options (``k`` or ``devices`` is required;
    ``time_limit``: the whole call's wall seconds): see `devplace_lite.solve.plan` and
    `devplace_lite.pipeline.mesh_plan.plan`. Returns a `PipelinePlan`; ``.write(folder)``
    writes ``plan.json`` and a torchrun script.
    """
    return solve.plan(model, example_inputs, **options)
