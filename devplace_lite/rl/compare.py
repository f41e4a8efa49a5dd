"""The yardsticks of a learned placer, all scored in the same simulator.

* `random_search`: the best of ``N`` random placements (``N`` simulator calls), the sanity
  baseline of Addanki et al. (2019).
* `exhaustive_search`: every placement of the units, on tiny graphs (``D^U`` calls, cut by about
  ``k!`` when the devices are interchangeable): the optimum *of the simulator*, the number every
  other method is measured against.
* `registry_baselines`: the library's classical methods (the yardsticks of
  `devplace_lite.methods.PARTITION`: topological fill, earliest-task-first, HEFT, the DP split,
  ...) called as they are and their
  placements simulated once each. They plan with their own cost model (the DP minimises the
  largest device load, a throughput objective; ETF and HEFT build a schedule of their own), so
  one simulator call scores each.

Every answer is a `Scored`: the placement, its simulated run time, the simulator calls spent and
the wall time. Nothing here imports torch.

Example
-------
>>> from devplace_lite.generators import layered
>>> from devplace_lite.devices import Cluster
>>> from devplace_lite.sim import Simulator
>>> g = layered(6, seed=0); c = Cluster(accelerators=2)
>>> best = exhaustive_search(Simulator(g, c))
>>> rand = random_search(Simulator(g, c), samples=20, seed=0)
>>> best.status, best.runtime <= rand.runtime
('optimal', True)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .. import methods
from ..throughput.exhaustive import _canonical
from ..devices import Cluster
from ..errors import DevplaceError, GraphError, LimitError
from ..graph import Graph
from ..sim import SimParams, Simulator
from .env import unit_steps

DEFAULT_LIMIT = 200_000


@dataclass
class Scored:
    """A placement with its simulated run time and the search effort behind it."""

    method: str
    assignment: np.ndarray | None
    runtime: float
    sim_calls: int
    seconds: float
    status: str = "feasible"   # feasible, optimal, or unavailable (with the reason in extra)
    extra: dict[str, Any] = field(default_factory=dict)


def _unit_allowed(sim: Simulator) -> tuple[list[np.ndarray], np.ndarray]:
    steps = unit_steps(sim.graph)
    allowed = sim.allowed()
    return steps, np.array([allowed[nodes].all(axis=0) for nodes in steps])


def _expand(steps: list[np.ndarray], unit_devices: np.ndarray, n: int) -> np.ndarray:
    a = np.empty(n, dtype=np.int64)
    for nodes, d in zip(steps, unit_devices):
        a[nodes] = d
    return a


def random_search(sim: Simulator, samples: int = 100, seed: int = 0) -> Scored:
    """Best of ``samples`` placements drawn uniformly over the devices each unit may use."""
    t0, c0 = time.perf_counter(), sim.calls
    rng = np.random.default_rng(seed)
    steps, allowed = _unit_allowed(sim)
    best, best_a = np.inf, None
    for _ in range(samples):
        units = np.array([rng.choice(np.flatnonzero(row)) for row in allowed])
        a = _expand(steps, units, sim.graph.n)
        value = sim.runtime(a)
        if value < best:
            best, best_a = value, a
    return Scored("random", best_a, float(best), sim.calls - c0, time.perf_counter() - t0,
                  extra={"samples": samples})


def exhaustive_search(sim: Simulator, limit: int = DEFAULT_LIMIT) -> Scored:
    """The placement of least simulated run time, by trying every one (tiny graphs only).

    When all accelerators are alike and all CPU cores are alike, only placements that use
    devices in first-use order are tried (the others are relabellings with the same run time).
    Raises `GraphError` when more than ``limit`` placements would be simulated.
    """
    t0, c0 = time.perf_counter(), sim.calls
    steps, allowed = _unit_allowed(sim)
    U, D, k = len(steps), sim.cluster.size, sim.cluster.k
    if D ** U > 50 * limit:
        raise LimitError(f"exhaustive search over {D}^{U} placements is beyond the limit of {limit}")
    symmetric = sim.params.homogeneous(sim.cluster)
    rows = []
    powers = D ** np.arange(U - 1, -1, -1, dtype=np.int64)
    for lo in range(0, D ** U, 1 << 16):
        idx = np.arange(lo, min(D ** U, lo + (1 << 16)), dtype=np.int64)
        AU = (idx[:, None] // powers[None, :]) % D
        ok = np.all(allowed[np.arange(U)[None, :], AU], axis=1)
        if symmetric:
            ok &= _canonical(AU, 0, k) & _canonical(AU, k, D)
        rows.append(AU[ok])
    AU = np.concatenate(rows) if rows else np.zeros((0, U), dtype=np.int64)
    if len(AU) > limit:
        raise LimitError(f"exhaustive search needs {len(AU)} simulations, over the limit of {limit}")
    best, best_a = np.inf, None
    for units in AU:
        a = _expand(steps, units, sim.graph.n)
        value = sim.runtime(a)
        if value < best:
            best, best_a = value, a
    return Scored("optimum", best_a, float(best), sim.calls - c0, time.perf_counter() - t0, status="optimal",
                  extra={"placements": int(len(AU)), "symmetric": symmetric})


def registry_baselines(sim: Simulator, names: Sequence[str] | None = None, seed: int = 0) -> dict[str, Scored]:
    """Run each registered partition method as is and simulate its placement once (``names``:
    default the registry's yardsticks, `devplace_lite.methods.yardsticks`).

    A name not (yet) registered, or a method that refuses the graph, comes back with status
    ``unavailable`` and the reason in ``extra["reason"]``.
    """
    out: dict[str, Scored] = {}
    for name in methods.yardsticks() if names is None else names:
        t0, c0 = time.perf_counter(), sim.calls
        try:
            fn = methods.resolve(methods.PARTITION, name)
            res = fn(sim.graph, sim.cluster, seed=seed)
            if res.assignment is None:
                raise GraphError(f"{name} found no placement ({res.status})")
            value = sim.runtime(res.assignment)
        except DevplaceError as e:
            out[name] = Scored(name, None, float("nan"), sim.calls - c0, time.perf_counter() - t0,
                               status="unavailable", extra={"reason": str(e)})
            continue
        out[name] = Scored(name, np.asarray(res.assignment), float(value), sim.calls - c0,
                           time.perf_counter() - t0, extra={"objective": res.objective, "status": res.status})
    return out


def compare(graphs: Sequence[Graph], cluster: Cluster, params: SimParams | None = None, *,
            policies: dict[str, Callable[[Simulator], Scored]] | None = None,
            classical: Sequence[str] | None = None, random_samples: int = 100, optimum: bool = False,
            seed: int = 0, limit: int = DEFAULT_LIMIT) -> list[dict[str, Any]]:
    """One row per graph: every method's simulated run time, simulator calls and seconds.

    ``policies`` maps a name to a function of a `Simulator` returning a `Scored` (a trained
    placer); ``optimum=True`` adds the exhaustive optimum (tiny graphs); ``classical``: the
    registry's methods to run (default its yardsticks, `devplace_lite.methods.yardsticks`). Each
    row also names the best classical method (``random`` included) and its run time.
    """
    classical = methods.yardsticks() if classical is None else list(classical)
    rows = []
    for g in graphs:
        found: dict[str, Scored] = {}
        found.update(registry_baselines(Simulator(g, cluster, params), classical, seed=seed))
        if random_samples:
            found["random"] = random_search(Simulator(g, cluster, params), random_samples, seed=seed)
        for name, fn in (policies or {}).items():
            found[name] = fn(Simulator(g, cluster, params))
        if optimum:
            found["optimum"] = exhaustive_search(Simulator(g, cluster, params), limit=limit)
        classic = {k: v for k, v in found.items()
                   if (k in classical or k == "random") and v.status != "unavailable"}
        best = min(classic, key=lambda k: classic[k].runtime) if classic else None
        rows.append({"graph": g.name, "nodes": g.n, "best_classical": best,
                     "best_classical_runtime": classic[best].runtime if best else math.nan,
                     "methods": {k: {"runtime": v.runtime, "sim_calls": v.sim_calls,
                                     "seconds": round(v.seconds, 4), "status": v.status}
                                 for k, v in found.items()}})
    return rows


def summarize(rows: Sequence[dict[str, Any]], reference: str = "best_classical") -> dict[str, dict[str, float]]:
    """Per method: geometric-mean run time over the reference (``"best_classical"`` or a method
    name such as ``"optimum"``), worst ratio, share of graphs within 5 % of the reference, mean
    simulator calls and mean seconds per graph."""
    out: dict[str, dict[str, float]] = {}
    names = sorted({k for r in rows for k in r["methods"]})
    for name in names:
        ratios, calls, secs = [], [], []
        for r in rows:
            m = r["methods"].get(name)
            ref = r["best_classical_runtime"] if reference == "best_classical" else \
                r["methods"].get(reference, {}).get("runtime", math.nan)
            if m is None or m["status"] == "unavailable" or not (ref > 0):
                continue
            ratios.append(m["runtime"] / ref)
            calls.append(m["sim_calls"])
            secs.append(m["seconds"])
        if ratios:
            v = np.array(ratios)
            out[name] = {"ratio": float(np.exp(np.mean(np.log(v)))), "worst": float(v.max()),
                         "within_5pct": float(np.mean(v <= 1.05 + 1e-12)), "graphs": len(v),
                         "sim_calls": float(np.mean(calls)), "seconds": float(np.mean(secs))}
    return out
