"""The exact planner: Piper's DP over pairs of ideals, with an exact knapsack inside each stage.

Recurrence. Let an *ideal* be a set of layers closed under successors (a suffix of the network).
``dp[I][k][s]`` is the least time per sample of a plan of ideal ``I`` on at most ``k`` devices
whose data-parallel degrees sum to at most ``s``. Its first stage is ``I \\ J`` for an ideal
``J ⊊ I``, with degrees ``(d, t)``, ``d | N``; holding ``y = ceil(s / d)`` micro-batches in
flight, its best time is a multiple-choice knapsack (one TMPC per layer, memory
``sum a y + b <= M``, least time), so

    dp[I][k][s] = min over J, t, d of max(dp[J][k - d t][s - d], knap(I \\ J, t, d, ceil(s / d)))

and the answer is ``dp[V][k][min(N, k)]``. Taking ``y`` from the bound ``s`` rather than the
exact sum only overestimates a stage that a smaller ``s`` also reaches, so the minimum over
``s`` is exact (Piper, NeurIPS 2021, section 4; the ``<=`` form is its program's).

Exactness: the DP is exhaustive over chains of ideals and degrees; the knapsack is solved
exactly by a Pareto-front dynamic program (`_kernels.solve_mckp`), where Piper's program uses a greedy rule
(``knapsack="greedy"`` reproduces that rule, to compare with its figures).

Speed: per ideal ``I`` only its *points* are stored: ``(k, s, v)`` where ``v = dp[I][k][s]`` is
lower than at every ``(k', s') <= (k, s)`` other than itself (a point dominated in both counts
yields only dominated candidates, so it is never needed); a candidate ``(k + d t, s + d)`` is
made from each point of ``J``, and along one ``k`` the first point where the stage is the
bottleneck ends it (the rest's time falls and the stage's grows with ``s``). The candidates of
``I`` are sorted by ``(k, s)`` (counting sort) and one pass keeps its points. When every layer's
options share their parameter size (Piper's inputs), an option costs ``(c1 - beta) / d + beta``
at degree ``d`` with ``beta`` the same for all of a layer's options, so one knapsack per pair and
``t`` serves every ``d``. Sub-ideals are visited from ``I`` downwards, and a stage that does not
fit one device at ``y = 1`` stops the descent; ``d`` stays within what the rest ``J`` leaves
(its least device count and degree sum). Complexity: ``O(P * T * (n + D * p))`` for ``P``
visited pairs of ideals, ``T`` tensor degrees, ``D`` divisors and ``p`` points per ideal, plus
one exact knapsack per distinct value of each ``(pair, t)``.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import LimitError
from .model import Model
from .plan import Result, Stage, evaluate

#: Largest number of ideals the planner enumerates.
IDEAL_LIMIT = 200_000


def ideals(model: Model, limit: int = IDEAL_LIMIT) -> tuple[list[int], list[list[int]]]:
    """Successor-closed sets as bit masks over the layer order, sorted by size (the empty set
    first), and for each the indices of its immediate sub-ideals (one layer fewer).

    Raises
    ------
    LimitError
        Past ``limit`` ideals.
    """
    index = {x.id: i for i, x in enumerate(model.layers)}
    n = len(model.layers)
    succ = [0] * n
    for u, v, _ in model.edges:
        succ[index[u]] |= 1 << index[v]
    seen = {0: None}
    subs: dict[int, list[int]] = {0: []}
    stack = [0]
    while stack:
        m = stack.pop()
        for v in range(n):
            if not (m >> v) & 1 and succ[v] & ~m == 0:
                m2 = m | (1 << v)
                if m2 not in seen:
                    seen[m2] = None
                    subs[m2] = []
                    stack.append(m2)
                    if len(seen) > limit:
                        raise LimitError(f"the layer graph has more than {limit} ideals")
                subs[m2].append(m)
    masks = sorted(seen, key=lambda m: (bin(m).count("1"), m))
    pos = {m: i for i, m in enumerate(masks)}
    return masks, [[pos[j] for j in subs[m]] for m in masks]


class _Arrays:
    """The model as flat arrays for the kernels."""

    def __init__(self, model: Model):
        layers = model.layers
        n = len(layers)
        index = {x.id: i for i, x in enumerate(layers)}
        self.tvals = sorted({t for x in layers for t in x.tmpcs})
        ins: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        outs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for u, v, c in model.edges:
            outs[index[u]].append((index[v], c))
            ins[index[v]].append((index[u], c))
        self.in_ptr = np.cumsum([0] + [len(a) for a in ins]).astype(np.int64)
        self.in_src = np.array([u for a in ins for u, _ in a], np.int64)
        self.in_c = np.array([c for a in ins for _, c in a], np.float64)
        self.out_ptr = np.cumsum([0] + [len(a) for a in outs]).astype(np.int64)
        self.out_dst = np.array([w for a in outs for w, _ in a], np.int64)
        self.out_c = np.array([c for a in outs for _, c in a], np.float64)
        optr, p, w, A, B, o_in, sfw, o_out, sbw, minmem, self.names = [0], [], [], [], [], [], [], [], [], [], []
        w_item, self.shared = [], True
        for i, x in enumerate(layers):
            for t in self.tvals:
                opts = x.tmpcs.get(t, ())
                for o in opts:
                    p.append(o.time_per_sample)
                    w.append(o.parameter_size)
                    A.append(o.memory_a)
                    B.append(o.memory_b)
                    o_in.append(len(sfw))
                    sfw.extend(o.sync_fw[layers[u].id] for u, _ in ins[i])
                    o_out.append(len(sbw))
                    sbw.extend(o.sync_bw[layers[v].id] for v, _ in outs[i])
                    self.names.append(o.name)
                optr.append(optr[-1] + len(opts))
                minmem.append(min((o.memory_a + o.memory_b for o in opts), default=-1.0))
                w_item.append(opts[0].parameter_size if opts else 0.0)
                self.shared &= all(o.parameter_size == w_item[-1] for o in opts)
        f8 = lambda a: np.array(a, np.float64)  # noqa: E731
        self.optr_vt = np.array(optr, np.int64)
        self.p, self.w, self.A, self.B = f8(p), f8(w), f8(A), f8(B)
        self.o_in, self.o_out = np.array(o_in, np.int64), np.array(o_out, np.int64)
        self.sfw, self.sbw, self.minmem, self.w_item = f8(sfw), f8(sbw), f8(minmem), f8(w_item)
        self.n_opts = len(p)


def divisors(N: int, upto: int) -> list[int]:
    """The divisors of ``N`` that are at most ``upto``, increasing."""
    return [d for d in range(1, min(N, upto) + 1) if N % d == 0]


def plan_exact(model: Model, time_limit: float | None = None, knapsack: str = "exact",
               progress=None, data_parallel: bool = True) -> Result:
    """The plan of least time per sample (module docstring); see `devplace_lite.parallelize`."""
    from . import _kernels as kn

    start = time.monotonic()
    arr = _Arrays(model)
    masks, subs = ideals(model)
    n, nI = len(model.layers), len(masks)
    nb = (n + 7) // 8
    raw = np.frombuffer(b"".join(m.to_bytes(nb, "little") for m in masks), np.uint8).reshape(nI, nb)
    bits = np.ascontiguousarray(np.unpackbits(raw, axis=1, bitorder="little")[:, :n])
    isub_ptr = np.cumsum([0] + [len(s) for s in subs]).astype(np.int64)
    isub = np.array([j for s in subs for j in s], np.int64)
    K, N = model.devices, model.microbatches
    Smax = min(N, K)
    divs = np.array(divisors(N, Smax) if data_parallel else [1], np.int64)
    tvals = np.array(arr.tvals, np.int64)
    greedy = knapsack == "greedy"
    shared = arr.shared and not greedy
    dense = (K + 1) * (Smax + 1) <= _DENSE_CELLS
    ptr = np.zeros(nI + 1, np.int64)
    cap = 1 << 16
    pool_k, pool_s, pool_v, pool_o = (np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap),
                                      np.zeros((cap, 3), np.int64))
    ptr[1] = 1  # the empty ideal: time 0 on no device (one point)
    flags = np.zeros(4, np.int64)
    stats = {"ideals": nI, "layers": n, "rounds": 0}
    # Rounds with a bound: a plan of time at most ub has every stage and every suffix at most ub,
    # so values above ub are dropped, which cuts most of the work. The bound starts just above a
    # lower bound and grows until a plan appears or nothing was cut (then no plan exists).
    lb = _lower_bound(model)
    ub = 1.5 * lb if model.devices > 1 and lb > 0 else kn.INF
    done = 0
    while True:
        stats["rounds"] += 1
        flags[0] = 0
        I = 1
        while I < nI:
            if time_limit is not None and time.monotonic() - start > time_limit:
                return Result("exact", "time_limit", None, reason=f"stopped in round {stats['rounds']} at ideal {I} of {nI}",
                              seconds=time.monotonic() - start, stats=stats)
            r = kn.fill_ideals(I, _PAIRS_PER_CALL, bits, isub_ptr, isub, tvals, arr.optr_vt, arr.in_ptr, arr.in_src,
                               arr.in_c, arr.out_ptr, arr.out_dst, arr.out_c, arr.o_in, arr.sfw, arr.o_out, arr.sbw,
                               arr.p, arr.w, arr.A, arr.B, arr.minmem, arr.w_item, divs, K, Smax, N, model.memory,
                               model.bandwidth, greedy, shared, dense, ub, ptr, pool_k, pool_s, pool_v, pool_o, flags)
            if r < 0:  # the pool is full at ideal -1 - r: grow it, go on from there
                I = -1 - r
                cap *= 2
                pool_k, pool_s, pool_v = np.resize(pool_k, cap), np.resize(pool_s, cap), np.resize(pool_v, cap)
                pool_o = np.resize(pool_o, (cap, 3))
                continue
            done += r - I
            I = r
            if progress is not None:
                progress(min(0.99, done / (2 * nI)))
        if ptr[nI - 1] < ptr[nI] or flags[0] == 0 or ub >= kn.INF:
            break
        # quadruple a few times, then no bound at all: an instance with no plan would otherwise
        # pay one full pass per doubling before the bound stops cutting
        ub = ub * 4 if stats["rounds"] < 3 and ub * 4 < 1e250 else kn.INF
    stats.update(bound_used=ub, points=int(ptr[nI]), pairs=int(flags[1]), stage_curves=int(flags[2]),
                 candidates=int(flags[3]))
    full = nI - 1

    def lookup(I: int, k: int, s: int) -> int:
        """The best point of ideal I on at most k devices with degrees summing to at most s."""
        e = -1
        for x in range(ptr[I], ptr[I + 1]):
            if pool_k[x] <= k and pool_s[x] <= s and (e < 0 or pool_v[x] < pool_v[e]):
                e = x
        return e

    e = lookup(full, K, Smax)
    if e < 0:
        return Result("exact", "infeasible", None, reason=_why_infeasible(model),
                      seconds=time.monotonic() - start, stats=stats)
    stats["dp_value"] = float(pool_v[e])
    stages: list[Stage] = []
    I, k, s = full, K, Smax
    while I != 0:
        e = lookup(I, k, s)
        J, t, d = (int(x) for x in pool_o[e])
        k0, s0 = int(pool_k[e]), int(pool_s[e])
        stages.append(stage_choice(model, arr, bits[I] & (1 - bits[J]), t, d, -(-s0 // d), greedy))
        I, k, s = J, k0 - d * t, s0 - d
    obj, stages, reason = evaluate(model, stages)
    return Result("exact", "optimal", obj, stages, bound=obj, seconds=time.monotonic() - start, stats=stats)


#: Largest (k + 1)(s + 1) grid an ideal's candidates are checked against as they come (GNMT,
#: ResNet, BERT up to 512 devices: BERT-64 at k = 512 plans in 0.8 s of CPU so, 2 s sorted);
#: past it they are sorted once per ideal (BERT on 2,048 devices, 0.15 s).
_DENSE_CELLS = 1 << 19
#: Pairs of ideals the kernel visits between two looks at the clock (and the progress bar).
_PAIRS_PER_CALL = 200_000


def stage_choice(model: Model, arr: "_Arrays", Sm: np.ndarray, t: int, d: int, y: int,
                 greedy: bool = False) -> Stage:
    """The stage of layers ``Sm`` (0/1 per layer) at degrees ``(d, t)`` with ``y`` micro-batches in
    flight, its TMPCs chosen by the exact knapsack (or Piper's greedy rule); ``tmpcs`` is empty
    when no choice fits."""
    from . import _kernels as kn

    Sm = np.ascontiguousarray(Sm, np.uint8)
    members = [v for v in range(len(model.layers)) if Sm[v]]
    ids = tuple(model.layers[v].id for v in members)
    picks = np.zeros(max(len(members), 1), np.int64)
    if kn.stage_pick(Sm, arr.tvals.index(t), np.array(arr.tvals, np.int64), arr.optr_vt, arr.in_ptr, arr.in_src,
                     arr.in_c, arr.out_ptr, arr.out_dst, arr.out_c, arr.o_in, arr.sfw, arr.o_out, arr.sbw, arr.p,
                     arr.w, arr.A, arr.B, d, model.microbatches, model.bandwidth, y, model.memory, greedy,
                     picks) >= kn.INF:
        return Stage(ids, d, t, {})
    return Stage(ids, d, t, {model.layers[v].id: arr.names[q] for v, q in zip(members, picks)})


def _lower_bound(model: Model) -> float:
    """Time per sample no plan beats: every layer's least device-seconds per sample (t times its
    compute time at degree t) summed, spread over all k devices (communication left out)."""
    work = sum(min(t * o.time_per_sample for t, os_ in x.tmpcs.items() for o in os_) for x in model.layers)
    return work / model.devices


def _why_infeasible(model: Model) -> str:
    """One line saying why no plan fits (the first layer that fits no device alone, if any)."""
    for x in model.layers:
        if min(o.memory_a + o.memory_b for os_ in x.tmpcs.values() for o in os_) > model.memory:
            return (f"layer {x.id} alone needs more than {model.memory:.6g} bytes per device "
                    f"with every TMPC, even with one micro-batch in flight")
    return (f"no split of the layers into stages fits {model.memory:.6g} bytes per device "
            f"on {model.devices} devices with {model.microbatches} micro-batches")
