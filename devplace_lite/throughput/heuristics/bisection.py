"""Recursive bisection with Fiduccia-Mattheyses refinement: a balanced, low-communication
pipeline split at compiler speed (method ``kl``).

Problem: split the training (or inference) graph over ``k`` accelerators as a chain of
ideals, so that it runs as a pipeline, with loads balanced and few costly edges cut.

Method (after Kernighan and Lin 1970, Fiduccia and Mattheyses 1982, in the setting of
Tavarageri et al. 2019): lay the blocks (`.blocks`) out in a topological order; give the
first half of the devices a prefix and the second half the rest, choosing the cut that
minimises ``max(load(left) / k_left, load(right) / k_right)`` under the model's loads,
communication included (all cuts scored at once by `.intervals`); then refine the cut with
FM passes: repeatedly move the best boundary block across (a left block none of whose
successors is left, or a right block none of whose predecessors is right, so both sides stay
ideals), lock it, and keep the best prefix of the pass. Recurse on both halves until every
part has one device. Memory caps enter as a first criterion (capacity of a side = its
devices x the cap). A CPU core pays no communication, so the cheap operators at either end of
a pipeline suit it: with cores, the bisection also runs with CPU core 0 given the prefix, or
the suffix, of the order that balances it against the accelerators' average share (scored
by the same interval loads), and the best of the three splits is kept. Finally `local_search`
polishes the k-way split.

Complexity: up to three bisections of ``O(log k)`` rounds, each ``O(m log m)`` for the cut
scores plus ``passes x moves x frontier`` move evaluations of ``O(block degree)`` each; then
the local search.

Example
-------
>>> from devplace_lite.generators import generate
>>> from devplace_lite.devices import Cluster
>>> r = kl(generate("layered", 200, seed=0, training=True), Cluster(accelerators=4))
>>> r.check().split, r.objective == r.check().max_load
('chain', True)

References
----------
B. W. Kernighan, S. Lin, "An efficient heuristic procedure for partitioning graphs", 1970.
C. M. Fiduccia, R. M. Mattheyses, "A linear-time heuristic for improving network partitions", 1982.
S. Tavarageri, S. Sridharan, B. Kaul, "Automatic model parallelism for deep neural networks
with compiler and hardware support", arXiv 1906.08168, 2019.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...cost import device_loads
from ...devices import Cluster
from ...graph import Graph
from ...result import Result
from .blocks import Blocks, block_structure
from .common import finish
from .incremental import LoadState
from .intervals import BothWays

_EPS = 1e-12


def _improves(key: tuple[float, float], best: tuple[float, float]) -> bool:
    """``key`` (memory overflow, load) beats ``best``: less overflow, or as little and a lower
    load, by a relative margin; any finite load beats an infinite one (no inf - inf)."""
    tol = _EPS * max(1.0, best[1]) if math.isfinite(best[1]) else 0.0
    return key[0] < best[0] - _EPS or (key[0] <= best[0] + _EPS and key[1] < best[1] - tol)


def kl(graph: Graph, cluster: Cluster, *, time_limit: float | None = None, seed: int = 0,
       passes: int = 4, max_moves: int = 64, patience: int = 16, polish: bool = True) -> Result:
    """Recursive bisection along a topological order with FM refinement (a chain split).

    ``passes`` FM passes at most per bisection, each of at most ``max_moves`` moves, ending
    early after ``patience`` moves without a new best. With ``polish`` the k-way split is
    then refined over all devices by `local_search` (chain moves between neighbouring
    stages; it may open a CPU core as a stage), within ``time_limit``. Ops no accelerator
    may run are pinned to a CPU core; when they sit between stages the split is no longer a
    chain and the refinement keeps whatever kind it is.
    """
    t0 = time.perf_counter()
    blocks = block_structure(graph)
    costs = blocks.units.on(cluster)
    pinned = costs.pinned
    on_acc = cluster.k > 0
    work = costs.acc_time if on_acc else costs.cpu_time
    mem = costs.mem
    cap = cluster.memory if on_acc else math.inf
    free = blocks.order[pinned[blocks.order] < 0]
    best = None
    for parts, spill in _cpu_options(graph, cluster, blocks, free, work, mem, cap):
        label = pinned.copy()
        label[spill] = cluster.k
        for keep, ds in parts:
            label[keep] = ds[0]
        for keep, ds in parts:
            label = _bisect(graph, cluster, blocks, label, keep, ds, work, mem, cap, passes, max_moves, patience)
        a = label[blocks.of_node]
        used = np.bincount(a, weights=graph.memory, minlength=cluster.size)[: cluster.k]
        key = (float(np.maximum(0.0, used - cap).sum()), float(np.sum(device_loads(graph, cluster, a), axis=0).max()))
        if best is None or key < best[0]:
            best = (key, label)
    label = best[1]
    if not polish:
        return finish("kl", graph, cluster, label[blocks.of_node], t0)
    from .local_search import local_search

    left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
    r = local_search(graph, cluster, label[blocks.of_node], time_limit=left, seed=seed, method="kl")
    r.seconds = time.perf_counter() - t0
    r.extra["bisection_objective"] = r.extra.pop("start_objective")
    return r


def _cpu_options(graph: Graph, cluster: Cluster, blocks: Blocks, free: np.ndarray, work: np.ndarray,
                 mem: np.ndarray, cap: float) -> list[tuple[list[tuple[np.ndarray, list[int]]], np.ndarray]]:
    """Ways to start: ([(blocks, accelerators to bisect them over), ...], blocks for CPU core 0).

    Without a core: everything over the accelerators. With one: also the prefix and the
    suffix of the order that balance the core against the accelerators' average share; and
    when the accelerators cannot hold all the memory, the segment of the order with the
    memory they cannot hold that balances best, the accelerators split before and after it.
    """
    devs = list(range(cluster.k))
    options: list[tuple[list[tuple[np.ndarray, list[int]]], np.ndarray]] = [([(free, devs or list(range(cluster.size)))],
                                                                            free[:0])]
    if not (cluster.k and cluster.l) or not len(free):
        return options
    k, G = cluster.k, len(free)
    cpu = blocks.units.on(cluster).cpu_time[free]
    cpu_fin = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(cpu), cpu, 0.0))])
    cpu_inf = np.concatenate([[0], np.cumsum(~np.isfinite(cpu))])

    def cpu_load(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """CPU load of free[a:b]; infinite where a node there cannot run on a CPU (no inf - inf)."""
        return np.where(cpu_inf[b] > cpu_inf[a], np.inf, cpu_fin[b] - cpu_fin[a])

    cpu_prefix, cpu_suffix = cpu_load(0, np.arange(G + 1)), cpu_load(np.arange(G + 1), G)  # free[:p], free[p:]
    mem_prefix = np.concatenate([[0.0], np.cumsum(mem[free])])
    loads = BothWays(graph, blocks, free, work)
    acc_suffix, acc_prefix = loads.column(G), loads.row(0)  # load of free[p:], of free[:p]
    room = k * cap
    fits_suffix = mem_prefix[-1] - mem_prefix <= room   # accelerators hold free[p:]
    fits_prefix = mem_prefix <= room                    # accelerators hold free[:p]
    for est, cut in ((np.where(fits_suffix, np.maximum(cpu_prefix, acc_suffix / k), np.inf),
                      lambda p: ([(free[p:], devs)], free[:p])),
                     (np.where(fits_prefix, np.maximum(cpu_suffix, acc_prefix / k), np.inf),
                      lambda p: ([(free[:p], devs)], free[p:]))):
        inner = est[1:G]
        if len(inner) and np.isfinite(inner.min()):
            options.append(cut(int(np.argmin(inner)) + 1))
    need = mem_prefix[-1] - room
    if need > 0 and k > 1:
        # the core takes free[a:b]; the accelerators before it must hold free[:a] and those
        # after it free[b:]: for each a, the shortest segment leaving both packable
        a = np.arange(G + 1)
        left_devs = np.ceil(mem_prefix / cap - 1e-9).astype(np.int64)        # accelerators free[:a] needs
        right_devs = np.ceil((mem_prefix[-1] - mem_prefix) / cap - 1e-9).astype(np.int64)  # free[b:] needs
        # right_devs falls as b grows: the first b with left_devs[a] + right_devs[b] <= k
        b = np.searchsorted(-right_devs, -(k - left_devs[a]), side="left")
        b = np.maximum(b, a)
        ok = (b <= G) & (left_devs[a] <= k)
        a, b = a[ok], b[ok]
        if len(a):
            est = np.maximum(cpu_load(a, b), (acc_prefix[a] + acc_suffix[b]) / k)
            i = int(np.argmin(est))
            lo, hi = int(a[i]), int(b[i])
            left, right = free[:lo], free[hi:]
            if not len(left) or not len(right):
                parts = [(left if len(left) else right, devs)]
            else:  # accelerators before and after the core: enough for the memory, then by work
                span = range(max(1, int(left_devs[lo])), min(k - 1, k - int(right_devs[hi])) + 1)
                kl_ = min(span, key=lambda j: max(acc_prefix[lo] / j, acc_suffix[hi] / (k - j)), default=1)
                parts = [(left, devs[:kl_]), (right, devs[kl_:])]
            options.append((parts, free[lo:hi]))
    return options


def _bisect(graph: Graph, cluster: Cluster, blocks: Blocks, label: np.ndarray, free: np.ndarray, devs: list[int],
            work: np.ndarray, mem: np.ndarray, cap: float, passes: int, max_moves: int, patience: int) -> np.ndarray:
    """Labels after recursive bisection of ``free`` over ``devs`` (other labels kept)."""
    on_acc = cluster.k > 0
    label = label.copy()
    label[free] = devs[0]
    segments: list[tuple[np.ndarray, list[int]]] = [(free, devs)]
    while any(len(d) > 1 for _, d in segments):
        loads = state = None  # the last round's tables go before this round's are built
        order = np.concatenate([s for s, _ in segments])
        loads = BothWays(graph, blocks, order, work, comm=on_acc)
        mem_prefix = np.concatenate([[0.0], np.cumsum(mem[order])])
        cuts, offset = [], 0
        for seg, ds in segments:
            a, b = offset, offset + len(seg)
            offset = b
            if len(ds) == 1:
                cuts.append(None)
                continue
            i, k1 = _best_cut(loads, mem_prefix, a, b, len(ds), cap)
            label[seg[: i - a]], label[seg[i - a:]] = ds[0], ds[k1]
            cuts.append((i - a, k1))
        state = LoadState(graph, cluster, blocks, label)
        new: list[tuple[np.ndarray, list[int]]] = []
        for (seg, ds), cut in zip(segments, cuts):
            if cut is None:
                new.append((seg, ds))
                continue
            k1 = cut[1]
            _refine(state, blocks, seg, ds[0], ds[k1], k1, len(ds) - k1, cap, passes, max_moves, patience)
            side = state.block_device[seg]
            new += [(seg[side == ds[0]], ds[:k1]), (seg[side == ds[k1]], ds[k1:])]
        label = state.block_device.copy()
        segments = new
    return label


def _best_cut(loads: BothWays, mem_prefix: np.ndarray, a: int, b: int, k: int, cap: float) -> tuple[int, int]:
    """Cut ``i`` of ``[a, b)`` and devices ``k1`` on the left minimising (memory overflow, balance)."""
    row, col = loads.row(a)[a: b + 1], loads.column(b)[a: b + 1]
    m_left = mem_prefix[a: b + 1] - mem_prefix[a]
    m_right = mem_prefix[b] - mem_prefix[a: b + 1]
    best = None
    for k1 in sorted({k // 2, k - k // 2}):
        k2 = k - k1
        over = np.maximum(0.0, m_left - k1 * cap) + np.maximum(0.0, m_right - k2 * cap)
        f = np.maximum(row / k1, col / k2)
        i = int(np.lexsort((f, over))[0])
        key = (over[i], f[i])
        if best is None or key < best[0]:
            best = (key, a + i, k1)
    return best[1], best[2]


def _refine(state: LoadState, blocks: Blocks, seg: np.ndarray, left: int, right: int, k1: int, k2: int,
            cap: float, passes: int, max_moves: int, patience: int) -> None:
    """FM passes moving frontier blocks of ``seg`` between the labels ``left`` and ``right``."""
    lab = state.block_device
    succ, pred = blocks.succ, blocks.pred

    def same(nb: np.ndarray, x: int) -> int:
        return int(np.count_nonzero(lab[nb] == lab[x])) if len(nb) else 0

    seg_list = seg.tolist()
    n_succ = {x: same(succ[x], x) for x in seg_list}  # successors on the same side
    n_pred = {x: same(pred[x], x) for x in seg_list}

    def movable(x: int) -> int | None:
        if lab[x] == left and n_succ[x] == 0:
            return right
        if lab[x] == right and n_pred[x] == 0:
            return left
        return None

    frontier = {x for x in seg_list if movable(x) is not None}

    def score(l_load: float, r_load: float, l_mem: float, r_mem: float) -> tuple[float, float]:
        over = max(0.0, l_mem - k1 * cap) + max(0.0, r_mem - k2 * cap)
        return over, max(l_load / k1, r_load / k2)

    def current() -> tuple[float, float]:
        ld = state.loads
        return score(ld[left], ld[right], state.memory[left], state.memory[right])

    def apply(x: int, t: int) -> None:
        s = int(lab[x])
        state.move(x, t)
        for y in succ[x].tolist():
            if y in n_pred:
                n_pred[y] += int(lab[y] == t) - int(lab[y] == s)
        for y in pred[x].tolist():
            if y in n_succ:
                n_succ[y] += int(lab[y] == t) - int(lab[y] == s)
        n_succ[x], n_pred[x] = same(succ[x], x), same(pred[x], x)
        for y in [x, *succ[x].tolist(), *pred[x].tolist()]:
            if y in n_succ:
                (frontier.add if movable(y) is not None else frontier.discard)(y)

    for _ in range(passes):
        start = current()
        best, best_len, since = start, 0, 0
        done: list[tuple[int, int]] = []
        locked: set[int] = set()
        while len(done) < max_moves and since < patience:
            pick = None
            for x in frontier - locked:
                t = movable(x)
                s = int(lab[x])
                new_s, new_t = state.delta(x, t)
                ms, mt = state.memory[s] - state.mem[x], state.memory[t] + state.mem[x]
                key = score(new_s, new_t, ms, mt) if s == left else score(new_t, new_s, mt, ms)
                if pick is None or key < pick[0]:
                    pick = (key, x, t, s)
            if pick is None:
                break
            key, x, t, s = pick
            apply(x, t)
            locked.add(x)
            done.append((x, s))
            if _improves(key, best):
                best, best_len, since = key, len(done), 0
            else:
                since += 1
        for x, s in reversed(done[best_len:]):
            apply(x, s)
        if best_len == 0:
            break
