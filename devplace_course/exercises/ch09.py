"""Exercises of chapter 09 (data, tensor and pipeline parallelism under Piper's model)."""

from __future__ import annotations

import math

import numpy as np

from devplace_lite.multidim.generate import random_model
from devplace_lite.multidim.model import Model
from .core import Case, close, register

# -- 09.1  the time per micro-batch of one stage ------------------------------------------------

#: The chapter's worked example: a chain whose two cut edges carry bytes and whose two layers have parameters.
SEED_091 = 1


def _stage_time(model: Model, layers, d: int, t: int, tmpcs: dict, edge_factor: float = 2.0,
                comm_over_d: bool = True, resync: bool = True) -> float:
    """Piper's stage time; the keyword switches build the typical mistakes."""
    inside = set(layers)
    by_id = {x.id: x for x in model.layers}
    N, B = model.microbatches, model.bandwidth
    total = 0.0
    for v in sorted(inside):
        o = next(o for o in by_id[v].tmpcs[t] if o.name == tmpcs[v])
        e = sum(edge_factor * (c + o.sync_fw[u]) for u, w, c in model.edges if w == v and u not in inside)
        e += sum(edge_factor * (c + o.sync_bw[w]) for u, w, c in model.edges if u == v and w not in inside)
        sync = 4.0 * (d - 1) * o.parameter_size / (d * N) if resync else 0.0
        total += ((e / d if comm_over_d else e) + sync) / B + o.time_per_sample / d
    return total


def stage_time(model: Model, layers: list, d: int, t: int, tmpcs: dict) -> float:
    """Time per micro-batch of the stage running ``layers`` on ``d`` replicas of a ``t``-device
    group with the given TMPC names (Piper's formula)."""
    return _stage_time(model, layers, d, t, tmpcs)


def _stage_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the chapter's worked example
        m = random_model(SEED_091, layers=4, chain=True, microbatches=8)
        layers, d, t = [1, 2], 2, 1
        tm = {1: "vanilla", 2: "vanilla"}
        text = (f"model = random_model({SEED_091}, layers=4, chain=True, microbatches=8); layers = [1, 2]; "
                "d, t = 2, 1; tmpcs = {1: 'vanilla', 2: 'vanilla'}")
        return Case((m, layers, d, t, tm), text=text)
    seed, n = int(rng.integers(0, 10_000)), int(rng.integers(3, 8))
    chain = bool(i == 1 or rng.random() < 0.3)
    m = random_model(seed, layers=n, chain=chain, microbatches=8)
    lo = int(rng.integers(0, n - 1))
    layers = list(range(lo, int(rng.integers(lo + 1, n + 1))))
    common = sorted(set.intersection(*(set(m.layers[v].tmpcs) for v in layers)))
    t = int(rng.choice(common))
    d = int(rng.choice([1, 2, 4, 8] if i > 1 else [2, 4]))
    tm = {v: str(rng.choice([o.name for o in m.layers[v].tmpcs[t]])) for v in layers}
    text = (f"model = random_model({seed}, layers={n}, chain={chain}, microbatches=8); layers = {layers}; "
            f"d, t = {d}, {t}; tmpcs = {tm}")
    return Case((m, layers, d, t, tm), text=text)


def _stage_slips(case: Case) -> list:
    m, layers, d, t, tm = case.args
    return [(_stage_time(m, layers, d, t, tm, edge_factor=1.0),
             "the activations crossing the stage boundary are counted once: each cut edge carries the "
             "activation forward and its gradient back, 2 (bytes + sync) per cut edge"),
            (_stage_time(m, layers, d, t, tm, comm_over_d=False),
             "the boundary transfers are not divided by d: the d replicas each move 1/d of the micro-batches"),
            (_stage_time(m, layers, d, t, tm, resync=False),
             "the data-parallel resynchronisation is missing: 4 (d - 1) w / (d N) bytes per layer, over the bandwidth")]


register(id="09.1", name="my_stage_time", title="Piper's time per micro-batch of one stage",
         reference=stage_time, cases=_stage_cases, compare=close(rtol=1e-9, atol=1e-15), slips=_stage_slips,
         fixed=1, n=16,
         forbidden=("devplace_lite.multidim.plan:stage_time", "devplace_lite.multidim.plan:evaluate",
                    "devplace_lite.multidim.planner", "devplace_lite.multidim._kernels",
                    "devplace_lite.multidim.baselines"),
         hint="for each layer v of the stage: its TMPC o at degree t; e = 2 (bytes + o.sync_fw[u]) for each edge "
              "u -> v from outside, 2 (bytes + o.sync_bw[w]) for each edge v -> w leaving; add "
              "(e / d + 4 (d - 1) o.parameter_size / (d N)) / bandwidth + o.time_per_sample / d")

# -- 09.2  micro-batches in flight --------------------------------------------------------------


def in_flight(data_parallel: list) -> np.ndarray:
    """Micro-batches each stage holds at its peak: ceil(sum of the degrees from it on / its own)."""
    out, suffix = [], sum(data_parallel)
    for d in data_parallel:
        out.append(-(-suffix // d))
        suffix -= d
    return np.array(out, dtype=np.int64)


def _same_counts(expected, got) -> str | None:
    """Whole numbers, one per stage, equal to the expected ones (a list, tuple or array)."""
    try:
        g = [float(x) for x in got]
    except (TypeError, ValueError):
        return f"expected a list of {len(expected)} whole numbers, got {type(got).__name__}"
    e = [float(x) for x in expected]
    if len(g) != len(e):
        return f"expected {len(e)} numbers (one per stage), got {len(g)}"
    return None if g == e else f"expected {[int(x) for x in e]}, got {[x if x != int(x) else int(x) for x in g]}"


def _flight_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:
        ds = [1, 4, 2, 2]
    else:
        ds = [int(x) for x in rng.choice([1, 2, 3, 4, 8], size=int(rng.integers(2, 7)))]
    return Case((ds,), text=f"data_parallel = {ds}")


def _flight_slips(case: Case) -> list:
    ds = case.args[0]
    p = len(ds)
    suffix = [sum(ds[s:]) for s in range(p)]
    return [([p - s for s in range(p)], "that is 1F1B without data parallelism (p - s stages from s on); with "
                                        "d_s replicas each holds ceil(D_s / d_s), D_s the degrees from s on summed"),
            ([D // d for D, d in zip(suffix, ds)], "rounded down: a replica holding part of a micro-batch's worth "
                                                   "still holds it whole; round up"),
            ([-(-sum(ds) // d) for d in ds], "the degrees of the earlier stages are in the sum: only stages s..p-1 "
                                             "have micro-batches in flight that stage s started")]


register(id="09.2", name="my_in_flight", title="micro-batches in flight per stage",
         reference=in_flight, cases=_flight_cases, compare=_same_counts, slips=_flight_slips, fixed=1, n=20,
         forbidden=("devplace_lite.multidim.plan:evaluate", "devplace_lite.multidim.planner"),
         hint="the degrees from stage s to the last, summed (D_s), divided by d_s and rounded up")

# -- 09.3  the knapsack inside a stage ------------------------------------------------------------


def stage_knapsack(options: list, capacity: float) -> float:
    """Least total time choosing one ``(time, memory)`` option per layer within ``capacity``;
    ``math.inf`` when nothing fits. Exact: the Pareto front of (memory, time) layer by layer."""
    front = [(0.0, 0.0)]  # (memory, time), memory increasing, time decreasing
    for opts in options:
        cand = sorted((m + om, t + ot) for m, t in front for ot, om in opts if m + om <= capacity)
        front = []
        for m, t in cand:
            if not front or t < front[-1][1]:
                front.append((m, t))
        if not front:
            return math.inf
    return front[-1][1]


def greedy_knapsack(options: list, capacity: float) -> float:
    """Piper's rule: start from each layer's fastest option; while over capacity, take the swap
    with the least extra time per byte saved (from the fastest option), in that order."""
    cur = [min(o, key=lambda x: (x[0], x[1])) for o in options]
    fast = list(cur)
    swaps = sorted(((ot - fast[i][0]) / (fast[i][1] - om), i, (ot, om)) for i, o in enumerate(options)
                   for ot, om in o if fast[i][1] - om > 1e-12)
    for _, i, opt in swaps:
        if sum(m for _, m in cur) <= capacity:
            break
        cur[i] = opt
    return sum(t for t, _ in cur) if sum(m for _, m in cur) <= capacity else math.inf


def _knap_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:
        opts = [[(3.0, 5.0), (4.0, 1.0)], [(2.0, 4.0), (3.0, 2.0)], [(5.0, 6.0), (7.0, 1.0)]]
        return Case((opts, 9.0), text=f"options = {opts}; capacity = 9.0")
    n = int(rng.integers(3, 8))
    opts = []
    for _ in range(n):
        t0, m0 = float(rng.integers(1, 20)), float(rng.integers(2, 20))
        k = int(rng.integers(1, 4))
        opts.append([(t0, m0)] + [(t0 + float(rng.integers(1, 10)), float(rng.integers(1, int(m0)))) for _ in range(k - 1)])
    low = sum(min(m for _, m in o) for o in opts)
    high = sum(min(o)[1] for o in opts)
    cap = float(rng.integers(int(low), int(max(low, high)) + 1))
    return Case((opts, cap), text=f"options = {opts}; capacity = {cap}")


def _knap_slips(case: Case) -> list:
    opts, cap = case.args
    return [(greedy_knapsack(opts, cap), "that is Piper's greedy rule (cheapest time per byte saved first); it can "
                                         "miss the best choice: keep every (memory, time) pair no other beats"),
            (sum(min(t for t, _ in o) for o in opts), "that is every layer's fastest option: the memory cap is not "
                                                      "applied")]


def _knap_diagnose(case: Case, expected: float, got) -> str | None:
    if isinstance(got, (int, float)) and got < expected - 1e-9:
        return "below the optimum: does your choice fit the capacity (memory of the chosen options summed)?"
    return None


register(id="09.3", name="my_stage_knapsack", title="the multiple-choice knapsack inside a stage",
         reference=stage_knapsack, cases=_knap_cases, compare=close(rtol=1e-9, atol=1e-9), slips=_knap_slips,
         diagnose=_knap_diagnose, fixed=1, n=20,
         forbidden=("devplace_lite.multidim._kernels", "devplace_lite.multidim.planner"),
         hint="go layer by layer keeping the (memory, time) totals no other total beats in both; drop totals over "
              "the capacity; the answer is the least time left (math.inf when none)")

# -- 09.6  a ring all-reduce ------------------------------------------------------------------------


def ring_allreduce_ms(nbytes: float, devices: int, link: float) -> float:
    """A ring all-reduce of ``nbytes`` over ``devices``: each device sends and receives
    ``2 (devices - 1) / devices`` of the bytes over its ``link`` bytes/s; in ms, 0 for one device
    (`devplace_lite.pipeline.tp_cost.allreduce_ms`, which imports torch)."""
    return 0.0 if devices == 1 else 2.0 * (devices - 1) / devices * nbytes / link * 1e3


#: Per-device links of an H100 cluster (`devplace_lite.devices.SPECS`): NVLink in a node, InfiniBand between.
_LINKS = (450e9, 50e9)


def _allreduce_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # one stage of Llama-3-8B (an eighth of its 32 GB of fp32 gradients) over 8 replicas
        return Case((4e9, 8, 50e9), text="nbytes, devices, link = 4e9, 8, 50e9")
    nbytes = float(rng.integers(1, 1000)) * 10.0 ** int(rng.integers(5, 10))
    devices = int(rng.choice([2, 3, 4, 8, 16, 64, 256, 1024]))
    link = float(rng.choice(_LINKS))
    return Case((nbytes, devices, link), text=f"nbytes, devices, link = {nbytes:g}, {devices}, {link:g}")


def _allreduce_slips(case: Case) -> list:
    b, d, link = case.args
    return [(b / link * 1e3 * (d - 1) / d, "that is a reduce-scatter alone: a ring all-reduce is a reduce-scatter "
                                           "and an all-gather, each moving (d - 1)/d of the bytes: 2 (d - 1)/d"),
            (2.0 * b / link * 1e3, "the (d - 1)/d is missing: each device sends all but its own share, "
                                   "2 (d - 1)/d of the bytes (0 for one device)"),
            (2.0 * (d - 1) * b / link * 1e3, "each step of the ring moves one d-th of the bytes, not all of them: "
                                             "2 (d - 1) steps of nbytes/d"),
            (ring_allreduce_ms(b, d, link) / 1e3, "that is in seconds: the answer is in milliseconds")]


register(id="09.6", name="my_allreduce_ms", title="a ring all-reduce over the data or tensor group",
         reference=ring_allreduce_ms, cases=_allreduce_cases, compare=close(rtol=1e-9, atol=1e-12),
         slips=_allreduce_slips, fixed=1, n=16,
         forbidden=("devplace_lite.pipeline.tp_cost", "devplace_lite.pipeline.mesh_plan"),
         hint="a reduce-scatter then an all-gather round the ring: each device sends 2 (d - 1) / d of the bytes "
              "over its link; times 1e3 for ms")

# -- 09.7  the meshes of N devices ------------------------------------------------------------------


def mesh_shapes(devices: int, degrees: list, microbatches: int, segments: int) -> np.ndarray:
    """Rows ``(dp, pp, tp)`` of every mesh of ``devices`` for a one-stage-per-rank schedule:
    ``tp`` among ``degrees`` and dividing ``devices``, ``pp`` dividing ``devices / tp`` and at most
    ``segments``, ``dp = devices / (tp pp)`` dividing ``microbatches``; sorted
    (`devplace_lite.pipeline.mesh_plan.shapes`, which imports torch)."""
    rows = [(devices // (t * pp), pp, t) for t in degrees if devices % t == 0
            for pp in range(1, min(devices // t, segments) + 1)
            if (devices // t) % pp == 0 and microbatches % (devices // (t * pp)) == 0]
    return np.array(sorted(rows), dtype=np.int64).reshape(-1, 3)


def _same_rows(expected: np.ndarray, got) -> str | None:
    """The same set of ``(dp, pp, tp)`` rows, in any order."""
    try:
        g = np.asarray(got, dtype=float).reshape(-1, 3) if len(got) else np.zeros((0, 3))
    except (TypeError, ValueError):
        return f"expected rows (dp, pp, tp), got {type(got).__name__}"
    want, have = {tuple(r) for r in expected.tolist()}, {tuple(int(x) for x in r) for r in g.tolist()}
    if want == have and len(g) == len(expected):
        return None
    extra, missing = sorted(have - want), sorted(want - have)
    return (f"expected {len(expected)} meshes {sorted(want)}, got {len(g)} {[tuple(int(x) for x in r) for r in g]}"
            + (f"; not meshes: {extra[:3]}" if extra else "") + (f"; missing: {missing[:3]}" if missing else ""))


def _mesh_cases(rng: np.random.Generator, i: int) -> Case:
    if i == 0:  # the chapter's tiny decoder: 8 processes, tensor degrees 1 and 2, 4 micro-batches, 6 segments
        return Case((8, [1, 2], 4, 6), text="devices, degrees, microbatches, segments = 8, [1, 2], 4, 6")
    devices = int(rng.choice([4, 8, 12, 16, 24, 32, 64, 128]))
    degrees = sorted({1, *(int(x) for x in rng.choice([2, 3, 4, 8], size=int(rng.integers(1, 4))))})
    microbatches = int(rng.choice([2, 4, 6, 8, 16, 32]))
    segments = int(rng.integers(2, 40))
    return Case((devices, degrees, microbatches, segments),
                text=f"devices, degrees, microbatches, segments = {devices}, {degrees}, {microbatches}, {segments}")


def _mesh_slips(case: Case) -> list:
    n, degrees, m, segs = case.args
    every = [(n // (t * pp), pp, t) for t in degrees if n % t == 0 for pp in range(1, n // t + 1) if (n // t) % pp == 0]
    rows = lambda keep: np.array(sorted(r for r in every if keep(r)), dtype=np.int64).reshape(-1, 3)  # noqa: E731
    return [(rows(lambda r: r[1] <= segs), "a data degree that does not divide the micro-batches is in: each replica "
                                           "runs m / dp whole micro-batches"),
            (rows(lambda r: m % r[0] == 0), "a pipeline longer than the model is in: each stage holds one segment "
                                            "at least, so pp <= segments"),
            (rows(lambda r: m % r[0] == 0 and r[1] <= segs and r[2] == 1), "only tensor degree 1: every degree "
                                                                          "the model allows that divides N is a mesh")]


def _mesh_diagnose(case: Case, expected: np.ndarray, got) -> str | None:
    n = case.args[0]
    try:
        g = np.asarray(got, dtype=np.int64).reshape(-1, 3)
    except (TypeError, ValueError):
        return None
    if len(g) and not all(int(a) * int(b) * int(c) == n for a, b, c in g.tolist()):
        return f"some rows do not use every device: dp x pp x tp must equal {n}"
    return None


register(id="09.7", name="my_mesh_shapes", title="the dp x pp x tp meshes of N devices",
         reference=mesh_shapes, cases=_mesh_cases, compare=_same_rows, slips=_mesh_slips, diagnose=_mesh_diagnose,
         fixed=1, n=20, forbidden=("devplace_lite.pipeline.mesh_plan",),
         hint="for each tensor degree t dividing N, each pp dividing N / t with pp <= segments: dp = N / (t pp), "
              "kept when it divides the micro-batches")
