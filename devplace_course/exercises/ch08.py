"""Exercises of chapter 08 (a real pipeline): stage order, a 1F1B step on paper, a measured bubble,
torchtitan's default split of a decoder.

Torch-free on purpose (the chapter's pipeline imports torch): 08.2 is checked against
`devplace_lite.cost.chain_order`, the order in which a chain split's stages run; 08.7 against
`devplace_lite.pipeline.titan.torchtitan_split`, which imports no torch either.
"""

from __future__ import annotations

import numpy as np

from devplace_lite.schedules import timeline as schedule
from devplace_lite.cost import chain_order
from devplace_lite.devices import Cluster
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from .core import Case, _short, close, random_topological_order, register

_FAMILIES = ["cells", "layered", "series_parallel", "skip_chain"]

# -- 08.2  the stage of every forward node -------------------------------------------------------


def stage_map(graph: Graph, cluster: Cluster, assignment) -> np.ndarray | None:
    """Stage of every forward node in node order, stages being `chain_order`; ``None`` if cyclic."""
    a = np.asarray(assignment, dtype=np.int64)
    order = chain_order(graph, cluster, a)
    if order is None:
        return None
    pos = np.full(cluster.size, -1, dtype=np.int64)
    pos[order] = np.arange(len(order))
    return pos[a[~graph.backward]]


def _gradients_follow(graph: Graph, a: np.ndarray) -> None:
    """Put every gradient node on the device of its forward node (same colocation unit)."""
    fwd, bwd = ~graph.backward, graph.backward
    unit_device = np.zeros(int(graph.units.max()) + 1, dtype=np.int64)
    unit_device[graph.units[fwd]] = a[fwd]
    a[bwd] = unit_device[graph.units[bwd]]


def _two_sources() -> Case:
    """Two branches joining: device 2 is ready from the start, device 1 only after device 0."""
    graph = Graph([Node(v, p_acc=1.0) for v in "xyzt"], [("x", "z"), ("z", "t"), ("y", "t")], name="two_sources")
    return Case((graph, Cluster(accelerators=4), np.array([0, 2, 1, 3])),
                text="graph = Graph([Node(v, p_acc=1.0) for v in 'xyzt'], [('x', 'z'), ('z', 't'), ('y', 't')]); "
                     "cluster = Cluster(accelerators=4); assignment = np.array([0, 2, 1, 3])")


def _stage_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:
        return _two_sources()
    family = str(rng.choice(_FAMILIES))
    n, seed = int(rng.integers(5, 15)), int(rng.integers(0, 1000))
    training = bool(rng.integers(2)) if i > 2 else i == 1
    k, cpus = int(rng.integers(2, 5)), int(rng.integers(0, 2))
    graph = generate(family, n, seed=seed, training=training)
    cluster = Cluster(accelerators=k, cpus=cpus)
    fwd = np.flatnonzero(~graph.backward)
    a = np.zeros(graph.n, dtype=np.int64)
    if i % 4 == 1:
        # a random split: the parts almost always form a cycle (keep the first that does)
        for _ in range(50):
            a[fwd] = rng.integers(0, cluster.size, size=len(fwd))
            _gradients_follow(graph, a)
            if chain_order(graph, cluster, a) is None:
                break
    else:
        # slices of a random topological order on a random permutation of the devices: a chain,
        # often with parts that no edge orders (the tie-break decides)
        order = random_topological_order(graph.succ, rng, keep=~graph.backward)
        parts = int(rng.integers(1, min(cluster.size, len(order)) + 1))
        cuts = np.sort(rng.choice(np.arange(1, len(order)), size=parts - 1, replace=False))
        devices = rng.permutation(cluster.size)[:parts]
        for block, nodes in enumerate(np.split(np.asarray(order), cuts)):
            a[nodes] = devices[block]
        _gradients_follow(graph, a)
    return Case((graph, cluster, a),
                text=f"graph = generate({family!r}, {n}, seed={seed}, training={training}); "
                     f"cluster = Cluster(accelerators={k}, cpus={cpus}); assignment = np.array({a.tolist()})")


def _stage_compare(expected, got) -> str | None:
    if expected is None:
        return None if got is None else f"expected None (the parts form a cycle), got {_short(got)}"
    if got is None:
        return (f"expected the stage map {expected.tolist()}, got None: the split is a chain (gradient nodes' "
                f"edges run backwards; only edges between two forward nodes order the stages)")
    try:
        g = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return f"expected an array of stage indices, got {type(got).__name__} {_short(got)}"
    if g.shape != expected.shape:
        return f"expected {expected.shape[0]} stages (one per forward node), got shape {g.shape}"
    bad = np.flatnonzero(g != expected)
    if not len(bad):
        return None
    return (f"{len(bad)} forward node(s) differ; first is forward node #{bad[0]}: expected stage {expected[bad[0]]}, "
            f"got {g[bad[0]]:g} (expected {expected.tolist()}, got {g.astype(int).tolist()})")


def _is_stage_order(graph: Graph, a: np.ndarray, stages: np.ndarray) -> bool:
    """``stages`` numbers the used devices 0..p-1 and every forward edge goes to the same or a later stage."""
    fwd = np.flatnonzero(~graph.backward)
    per_device: dict[int, int] = {}
    for v, s in zip(fwd, stages):
        if per_device.setdefault(int(a[v]), int(s)) != int(s):
            return False
    if sorted(per_device.values()) != list(range(len(per_device))):
        return False
    stage = dict(zip(fwd.tolist(), stages.tolist()))
    return all(stage[int(u)] <= stage[int(w)] for u, w in zip(graph.src.tolist(), graph.dst.tolist())
               if u in stage and w in stage)


def _stage_slips(case: Case) -> list:
    graph, cluster, a = case.args
    fwd = ~graph.backward
    used = sorted(set(a[fwd].tolist()))
    return [(a[fwd], "those are device indices: a stage is the device's position in the order of the parts"),
            (np.searchsorted(used, a[fwd]), "that ranks the used devices by index; the stage order comes from the "
                                            "edges between the parts")]


def _stage_diagnose(case: Case, expected, got) -> str | None:
    graph, cluster, a = case.args
    if expected is None:
        return "some forward edge leaves a device and another comes back to it: no order of the devices " \
               "sends every edge forward, so return None"
    if got is None:
        return None
    g = np.asarray(got, dtype=np.int64)
    if g.shape == expected.shape and _is_stage_order(graph, a, g):
        return "a valid stage order, but ties break differently: when several devices are ready " \
               "(all their predecessors placed), take the one with the smallest index"
    return None


register(id="08.2", name="my_stage_map", title="the stage of every forward node of a chain split",
         reference=stage_map, cases=_stage_cases, compare=_stage_compare, slips=_stage_slips, diagnose=_stage_diagnose,
         fixed=1, n=20,
         forbidden=("devplace_lite.cost:chain_order", "devplace_lite.pipeline"),
         hint="build the graph of parts (an arc d -> e where a forward edge goes from device d to device e), "
              "sort it topologically taking the smallest ready device first, and number the devices in that order")

# -- 08.3  a 1F1B step on paper ------------------------------------------------------------------


def one_f_one_b_step(forward, backward, microbatches: int) -> float:
    """Step time of a 1F1B training step with instant hand-overs, by list scheduling.

    Stage ``s`` of ``p`` runs ``w = p - 1 - s`` forwards, then ``m - w`` pairs (forward, backward),
    then ``w`` backwards; a forward waits for the previous stage's forward of its micro-batch, a
    backward for the next stage's backward (the last stage: its own forward).
    """
    f, b, m = list(map(float, forward)), list(map(float, backward)), int(microbatches)
    p = len(f)
    ops = []
    for s in range(p):
        w = min(p - 1 - s, m)
        seq = [("F", j) for j in range(w)]
        for j in range(m - w):
            seq += [("F", w + j), ("B", j)]
        ops.append(seq + [("B", j) for j in range(m - w, m)])
    done: dict[tuple[str, int, int], float] = {}
    nxt, free = [0] * p, [0.0] * p
    while len(done) < 2 * p * m:
        progressed = False
        for s in range(p):
            while nxt[s] < len(ops[s]):
                kind, j = ops[s][nxt[s]]
                dep = (("F", s - 1, j) if s else None) if kind == "F" else \
                      (("B", s + 1, j) if s < p - 1 else ("F", s, j))
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                free[s] = done[(kind, s, j)] = start + (f[s] if kind == "F" else b[s])
                nxt[s] += 1
                progressed = True
        if not progressed:  # cannot happen for this order; guards the loop
            raise RuntimeError("1F1B schedule deadlocked")
    return max(done.values())


def _one_f_one_b_cases(rng: np.random.Generator, i: int) -> Case:
    fixed = [([1.0, 2.0], [2.0, 4.0], 4), ([1.0] * 4, [2.0] * 4, 8), ([3.0], [5.0], 3)]
    if i < len(fixed):
        f, b, m = fixed[i]
    else:  # unequal stages whose slowest forward and slowest backward often differ
        p = int(rng.integers(2, 6))
        m = p + int(rng.integers(0, 7))
        f = np.round(rng.lognormal(0.0, 0.6, size=p), 3).tolist()
        b = np.round(np.asarray(f) * rng.uniform(0.5, 3.5, size=p), 3).tolist()
    return Case((f, b, m), text=f"forward = {f}; backward = {b}; microbatches = {m}")


def _one_f_one_b_slips(case: Case) -> list:
    f, b, m = case.args
    fb = [x + y for x, y in zip(f, b)]
    return [(schedule.makespan(schedule.gpipe(f, m, backward=b)),
             "that is GPipe's step (all m forwards, then all m backwards): under 1F1B stage s starts its backwards "
             "after p - s forwards"),
            (schedule.gpipe_formula(fb, m),
             "that is the fused estimate sum(f + b) + (m - 1) max(f + b), exact for equal stages only: "
             "simulate the boxes")]


register(id="08.3", name="my_1f1b_step", title="step time of a 1F1B pipeline on paper",
         reference=one_f_one_b_step, cases=_one_f_one_b_cases, compare=close(rtol=1e-9, atol=1e-9),
         slips=_one_f_one_b_slips, fixed=3, n=20, forbidden=("devplace_lite.schedules.timeline", "devplace_lite.pipeline"),
         hint="give each stage its list of boxes (p - 1 - s forwards, then forward/backward pairs, then the "
              "remaining backwards); a box starts when its stage is free and the box it waits for has ended")

# -- 08.4  the bubble of a measured step ---------------------------------------------------------


def bubble_from_events(events, step_ms: float, stages: int) -> float:
    """Idle share of a step: one minus the busy time over ``stages`` lanes of length ``step_ms``."""
    return 1.0 - sum(e[4] for e in events) / (stages * step_ms)


def _events_cases(rng: np.random.Generator, i: int) -> Case:
    """A GPipe step on paper with random stage times, each box delayed by a random wait (messages)."""
    p, m = (2, 4) if i == 0 else (int(rng.integers(1, 5)), int(rng.integers(1, 7)))
    f = np.round(rng.uniform(0.5, 3.0, size=p), 3).tolist()
    b = np.round(np.asarray(f) * 2, 3).tolist()
    events, shift = [], 0.0
    for lane, start, dur, label, kind in sorted(schedule.gpipe(f, m, backward=b), key=lambda t: t[1]):
        shift += round(float(rng.uniform(0.0, 0.3)), 3) if i else 0.0
        events.append((int(lane.split()[1]), kind, int(label[1:]), round(start + shift, 3), dur))
    step = round(max(e[3] + e[4] for e in events) + (float(rng.uniform(0.0, 1.0)) if i else 0.0), 3)
    return Case((events, step, p), text=f"events = {events}; step_ms = {step}; stages = {p}")


def _events_slips(case: Case) -> list:
    events, step, p = case.args
    busy = sum(e[4] for e in events)
    return [(busy / (p * step), "that is the busy share; the bubble is what is left of it"),
             (1 - busy / step, "divide by the time of all the lanes: stages x step_ms"),
             (1 - busy / (p * max(e[3] + e[4] for e in events)),
              "the step lasts step_ms, which can end after the last box (the optimizer, the last message)")]


register(id="08.4", name="my_bubble_from_events", title="idle share of a measured pipeline step",
         reference=bubble_from_events, cases=_events_cases, compare=close(rtol=1e-9, atol=1e-9),
         slips=_events_slips, fixed=1, n=20,
         forbidden=("devplace_lite.schedules.timeline:busy_fraction", "devplace_lite.pipeline"),
         hint="the stages are busy for the sum of the durations (the fifth field); the step offers "
              "stages x step_ms of stage time")

# -- 08.6  a schedule's forecast: step time and peak memory ----------------------------------------


def one_f_one_b_forecast(forward, backward, static_bytes, activation_bytes, microbatches: int):
    """``(step_ms, peak bytes per stage)`` of a 1F1B training step on paper: the replay of torch's
    own order (`devplace_lite.schedules.simulate`), a stage holding its static bytes and each
    micro-batch's activations from its forward to its backward."""
    from devplace_lite.schedules.simulate import simulate

    p = len(forward)
    sim = simulate("1f1b", p, int(microbatches), {"F": list(forward), "B": list(backward)},
                   static_bytes=list(static_bytes), activation_bytes=list(activation_bytes))
    return sim.step_ms, np.asarray(sim.rank_peak_bytes)


def _forecast_cases(rng: np.random.Generator, i: int) -> Case:
    fixed = [([1.0, 1.0], [2.0, 2.0], [100, 100], [10, 10], 4), ([1.0, 2.0, 1.5], [2.0, 3.0, 2.5], [50, 0, 70],
                                                                   [8, 4, 6], 5)]
    if i < len(fixed):
        f, b, st, act, m = fixed[i]
    else:
        p = int(rng.integers(2, 6))
        m = p + int(rng.integers(0, 6))
        f = np.round(rng.lognormal(0.0, 0.5, size=p), 3).tolist()
        b = np.round(np.asarray(f) * rng.uniform(1.0, 3.0, size=p), 3).tolist()
        st = rng.integers(0, 1000, size=p).tolist()
        act = rng.integers(1, 200, size=p).tolist()
    return Case((f, b, st, act, m), text=f"forward = {f}; backward = {b}; static_bytes = {st}; "
                                         f"activation_bytes = {act}; microbatches = {m}")


def _pair(expected, got) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (step_ms, peaks per stage), got {_short(got)}"
    return close()(expected[0], got[0]) or close()(np.asarray(expected[1], float), np.asarray(got[1], float))


def _forecast_slips(case: Case) -> list:
    f, b, st, act, m = case.args
    step, _ = one_f_one_b_forecast(f, b, st, act, m)
    p = len(f)
    return [((step, [s + m * a for s, a in zip(st, act)]),
             "that keeps all m micro-batches on every stage, GPipe's memory: under 1F1B stage s holds at most "
             "p - s of them"),
            ((step, [s + a for s, a in zip(st, act)]),
             "each stage holds several micro-batches at its peak: those forwarded but not yet backwarded"),
            ((step, [min(m, p - s) * a for s, a in enumerate(act)]),
             "add the static bytes (weights, gradients, optimizer state)")]


register(id="08.6", name="my_1f1b_forecast", title="a schedule's forecast: step time and peak memory per stage",
         reference=one_f_one_b_forecast, cases=_forecast_cases, compare=_pair, slips=_forecast_slips, fixed=2, n=20,
         forbidden=("devplace_lite.schedules.simulate", "devplace_lite.schedules.search", "devplace_lite.pipeline"),
         hint="replay the boxes as in my_1f1b_step and, per stage, count the micro-batches forwarded and not yet "
              "backwarded at each moment: the peak is the static bytes plus the most of them times the activations")


# -- 08.7  torchtitan's default split of a decoder -----------------------------------------------------


def torchtitan_layers(layers: int, stages: int) -> np.ndarray:
    """Layers on each stage of torchtitan's default split (`torchtitan_split`): the embedding and
    the head each weighed as one layer."""
    from devplace_lite.pipeline.titan import torchtitan_split

    names = ["embed"] + [f"layers.{i}" for i in range(layers)] + ["head"]
    return np.bincount(torchtitan_split(names, stages)[1:-1], minlength=stages)


def _torchtitan_cases(rng: np.random.Generator, i: int) -> Case:
    fixed = [(16, 4), (6, 5)]
    if i < len(fixed):
        layers, stages = fixed[i]
    else:
        stages = int(rng.integers(2, 9))
        layers = int(rng.integers(max(1, 2 * stages - 2), 8 * stages))
    return Case((layers, stages), text=f"layers = {layers}; stages = {stages}")


def _torchtitan_slips(case: Case) -> list:
    layers, stages = case.args
    even = [layers // stages + (s < layers % stages) for s in range(stages)]
    per, extra = divmod(layers + 2, stages)
    late = [per + (s >= stages - extra) for s in range(stages)]
    late[0] -= 1
    late[-1] -= 1
    return [(np.asarray(even), "that deals the layers out evenly and forgets that the first stage also runs the embedding and "
                   "the last the norm and the head, each weighed as a layer"),
            (np.asarray(late), "the stages that get one layer's worth more are the first ones, not the last")]


register(id="08.7", name="my_torchtitan_layers", title="torchtitan's default split of a decoder LM",
         reference=torchtitan_layers, cases=_torchtitan_cases, slips=_torchtitan_slips, fixed=2, n=20,
         forbidden=("devplace_lite.pipeline",),
         hint="count the embedding and the head as one layer each: deal layers + 2 out as evenly as you can, the "
              "first stages taking the remainder, then take one from the first stage and one from the last")
