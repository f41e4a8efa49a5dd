"""Exercises of chapter 01 (the device placement problem)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from devplace_lite.schedules import timeline as schedule
from devplace_lite.cost import device_loads, max_load
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from .core import Case, close, exact, register

# -- 01.2  the max-load of a placement, from the formula ----------------------------------------


def _diamond() -> tuple[Graph, str]:
    g = Graph([Node("a", p_acc=2, p_cpu=20, comm=0.5), Node("b", p_acc=3, p_cpu=30, comm=1.0),
               Node("c", p_acc=4, p_cpu=40, comm=0.25), Node("d", p_acc=2, p_cpu=20)],
              [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], name="diamond")
    return g, ('graph = Graph([Node("a", p_acc=2, p_cpu=20, comm=0.5), Node("b", p_acc=3, p_cpu=30, comm=1.0), '
               'Node("c", p_acc=4, p_cpu=40, comm=0.25), Node("d", p_acc=2, p_cpu=20)], '
               '[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])')


def _max_load_cases(rng: np.random.Generator, i: int) -> Case:
    if i < 2:  # the chapter's diamond: first on two accelerators, then with b on a CPU core
        g, text = _diamond()
        cluster = Cluster(accelerators=2, cpus=i)
        a = np.array([0, 0, 1, 1] if i == 0 else [0, 2, 1, 1])
    else:
        family = str(rng.choice(["cells", "layered", "series_parallel", "skip_chain"]))
        n, seed, training = int(rng.integers(6, 31)), int(rng.integers(0, 1000)), bool(rng.random() < 0.3)
        g = generate(family, n, seed=seed, training=training)
        text = f"graph = generate({family!r}, {n}, seed={seed}, training={training})"
        cluster = Cluster(accelerators=int(rng.integers(1, 5)), cpus=int(rng.integers(0, 3)))
        # each core takes its share of the nodes in proportion to its speed
        speed = np.r_[np.ones(cluster.k), np.full(cluster.l, float(np.nanmean(g.p_acc) / np.nanmean(g.p_cpu)))]
        a = rng.choice(cluster.size, size=g.n, p=speed / speed.sum())
        g, text = _core_just_below(g, cluster, a, text)
    return Case((g, cluster, a), text=f"{text}; cluster = Cluster(accelerators={cluster.k}, cpus={cluster.l}); "
                                     f"assignment = np.array({a.tolist()})")


def _core_just_below(g: Graph, cluster: Cluster, a: np.ndarray, text: str) -> tuple[Graph, str]:
    """Scale the CPU times so that the busiest core sits just below the max-load, by half the
    transfers it would pay if cores paid them: then every slip, on either kind of device, moves
    the max-load (a slip on a device below the max-load shows nowhere)."""
    if not cluster.l or not cluster.k:
        return g, text
    compute, comm = device_loads(g, cluster, a)
    top = float((compute + comm)[: cluster.k].max())
    paid = device_loads(g, Cluster(accelerators=cluster.size), a)[1][cluster.k:]
    core = int(np.argmax(paid))
    if paid[core] <= 0 or compute[cluster.k + core] <= 0:
        return g, text
    beta = round((top - paid[core] / 2) / compute[cluster.k + core], 6)
    if beta <= 0:
        return g, text
    g = g.with_nodes([Node(**{**v.__dict__, "p_cpu": None if v.p_cpu is None else v.p_cpu * beta}) for v in g.nodes])
    return g, (f"{text}; graph = graph.with_nodes([Node(**{{**v.__dict__, 'p_cpu': v.p_cpu * {beta}}}) "
               f"for v in graph.nodes])")


def _variant_max_load(g: Graph, cluster: Cluster, a, *, per_edge=False, cpu_pays=False, send=True, recv=True,
                      comm=True) -> float:
    """The max-load under a mistaken reading of the model (to recognise a learner's slip)."""
    a = np.asarray(a)
    load = np.where(a < cluster.k, g.p_acc, g.p_cpu).astype(float)
    load = np.bincount(a, weights=load, minlength=cluster.size)
    if comm:
        paid = set()
        for u, w in zip(g.src, g.dst):
            if a[u] == a[w]:
                continue
            for d, on in ((a[u], send), (a[w], recv)):
                if on and (cpu_pays or d < cluster.k) and (per_edge or (u, d) not in paid):
                    paid.add((u, d))
                    load[d] += g.comm[u]
    return float(load.max())


_MAX_LOAD_SLIPS = [
    (dict(comm=False), "no transfer is charged at all: add c(u) for producers whose edges cross a device boundary"),
    (dict(per_edge=True), "a transfer seems charged once per crossing edge; the model charges producer u once per device"),
    (dict(cpu_pays=True), "CPU cores seem to pay transfers; in this model they pay none (host memory is where data goes)"),
    (dict(send=False), "only the receiving device seems to pay; the sender pays c(u) too"),
    (dict(recv=False), "only the sending device seems to pay; every receiving accelerator pays c(u) too"),
]


def _max_load_slips(case: Case) -> list:
    return [(_variant_max_load(*case.args, **kwargs), message) for kwargs, message in _MAX_LOAD_SLIPS]


register(id="01.2", name="my_max_load", title="max-load of a placement from the formula",
         reference=lambda graph, cluster, assignment: max_load(graph, cluster, np.asarray(assignment)),
         cases=_max_load_cases, compare=close(rtol=1e-9, atol=1e-9), slips=_max_load_slips, fixed=2, n=30,
         forbidden=("devplace_lite.cost:max_load", "devplace_lite.cost:device_loads", "devplace_lite.cost:evaluate",
                    "devplace_lite.throughput.exhaustive", "devplace_lite.sim"),
         hint="a device's load is its compute (p_acc on an accelerator, p_cpu on a CPU core) plus, on an "
              "accelerator only, c(u) once for every producer u that has an edge crossing the device's boundary")

# -- 01.3  the step time of a forward GPipe pipeline -------------------------------------------------


def gpipe_step(stage_times, microbatches: int) -> float:
    """Finish time of the last micro-batch on the last stage (forward only), by simulation."""
    return schedule.makespan(schedule.gpipe(list(stage_times), int(microbatches)))


def _step_cases(rng: np.random.Generator, i: int) -> Case:
    fixed = [([1.0] * 4, 8), ([2.0] * 3, 1), ([3.5], 5)]
    if i < len(fixed):
        t, m = fixed[i]
    else:
        p, m = int(rng.integers(2, 9)), int(rng.integers(1, 33))
        # a few more equal-stage cases first, then unequal stages: the general formula is the point
        t = [round(float(rng.uniform(0.5, 3.0)), 3)] * p if i < 6 else \
            np.round(rng.lognormal(0.0, 0.6, size=p), 3).tolist()
    return Case((t, m), text=f"stage_times = {t}; microbatches = {m}")


def _step_slips(case: Case) -> list:
    t, m = case.args
    p = len(t)
    return [((m + p - 1) * max(t), "(m + p - 1) x max(t) holds only for equal stages: the other stages "
                                    "take less than max(t) while the pipeline fills and drains"),
             ((m + p - 1) * float(np.mean(t)), "(m + p - 1) x the mean stage time is not it: in steady state "
                                               "the slowest stage sets the pace"),
             (m * sum(t), "that runs the micro-batches one after another, without pipelining"),
             (sum(t) + m * max(t), "off by one micro-batch: the first micro-batch's trip through all stages "
                                   "already includes one max(t)")]


register(id="01.3", name="my_gpipe_step", title="forward GPipe step time for any stage times",
         reference=gpipe_step, cases=_step_cases, compare=close(rtol=1e-9, atol=1e-9), slips=_step_slips,
         fixed=6, n=20, forbidden=("devplace_lite.schedules.timeline:gpipe", "devplace_lite.schedules.timeline:makespan",
                                   "devplace_lite.schedules.timeline:gpipe_formula"), hint="follow one chain of tasks through the grid of (stage, micro-batch) boxes: the step ends "
                    "when the longest such chain ends; which stage would it linger on?")

# -- 01.4  how many micro-batches keep the bubble small --------------------------------------------------


def fewest_microbatches(stages: int, target: float) -> int:
    """Smallest m >= 1 with bubble fraction (p - 1) / (m + p - 1) at most ``target`` (0 < target <= 1).

    Exact arithmetic on the decimal value of ``target``: a closed form in floats may land either
    side of a boundary such as p = 8, target = 0.1 (m = 63 gives exactly 10 %), so the instances
    avoid other exact boundaries.
    """
    p, b = int(stages), Fraction(str(target))
    m = max(1, math.ceil((p - 1) * (1 - b) / b))  # (p-1)/(m+p-1) <= b  <=>  m >= (p-1)(1-b)/b
    return m


def _boundary(p: int, target: float) -> bool:
    x = (p - 1) * (1 - Fraction(str(target))) / Fraction(str(target))
    return x.denominator == 1


def _fewest_cases(rng: np.random.Generator, i: int) -> Case:
    fixed = [(8, 0.1), (1, 0.05), (4, 0.5), (2, 0.75)]
    if i < len(fixed):
        p, target = fixed[i]
    else:
        p, target = int(rng.integers(2, 33)), round(float(rng.uniform(0.02, 0.6)), 4)
        while _boundary(p, target):  # keep float round-off out of the grade
            target = round(target + 1e-4, 4)
    return Case((p, target), text=f"stages = {p}; target = {target}")


def _fewest_slips(case: Case) -> list:
    p, target = case.args
    x = (p - 1) * (1 - target) / target
    return [(max(1, math.floor(x)), "that rounds (p - 1)(1 - target) / target down: the smallest integer m at or "
                                    "above it is the ceiling"),
            (max(1, math.ceil((p - 1) / target)), "that solves (p - 1) / m <= target: the bubble's denominator is "
                                                  "m + p - 1, the whole step")]


def _fewest_diagnose(case: Case, expected: int, got) -> str | None:
    if got == expected - 1:
        return "one short: with that many micro-batches the bubble is still above the target"
    if got == expected + 1:
        return ("one too many: the m before already brings the bubble down to the target "
                "(at or below counts; check how you round)")
    if got == 0:
        return "a step has at least one micro-batch"
    return None


register(id="01.4", name="fewest_microbatches", title="fewest micro-batches for a bubble at most a target",
         reference=fewest_microbatches, cases=_fewest_cases, compare=exact(), slips=_fewest_slips, diagnose=_fewest_diagnose,
         fixed=4, n=20,
         hint="solve (p - 1) / (m + p - 1) <= target for m, then take the smallest integer m >= 1 that satisfies it")
