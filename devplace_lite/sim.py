"""A discrete-event simulator of a placement's run time, memory and device occupation.

Problem: given a placement (a device for every node), how long does one sample (or a stream of
samples) take when every device runs the operators placed on it one at a time, and data moves
between devices over links? The analytical cost model (`devplace_lite.cost`) answers a simpler
question, the steady-state time per sample under "no overlap"; this simulator also answers the
single-sample run time that Placeto (Addanki et al., 2019) optimises, with explicit device and
link parameters so that heterogeneous clusters can be taught.

How it runs
-----------
* Every device keeps a queue of ready operators and runs the oldest first (first-in first-out
  by ready time; ties by topological position; with several samples, the lower sample first).
  An operator is ready when each of its inputs has arrived on its device.
* Compute time of node ``v`` on device ``d``: ``p(v) / speed[d] + overhead``, with ``p = p_acc``
  on accelerators and ``p_cpu`` on CPU cores.
* Transfer time of ``u``'s output from/to device ``d``: ``comm(u) + latency[d]`` when
  ``bandwidth`` is ``None`` (the cost model's own transfer times), else
  ``out_bytes(u) / bandwidth[d] + latency[d]`` (in ms).
* ``overlap=True`` (Placeto's simulator): each device has its own outgoing link, a second
  first-in first-out queue beside the compute queue, so compute and communication overlap.
  A transfer is sent once per (producer, receiving device) on the sender's link; the receiver
  pays nothing. Between two CPU cores data moves for free (shared host memory).
* ``overlap=False`` (the cost model's "calls"): a transfer occupies the devices themselves. An
  accelerator that produces ``u`` uploads it to host memory once (a send task in its compute
  queue), and every other accelerator that consumes ``u`` downloads it once (a receive task);
  CPU cores pay nothing. Each device's busy time per sample is then exactly its load in
  `devplace_lite.cost.device_loads`.
* Memory: the resident bytes of `Graph.memory` of the nodes on a device, plus transient output
  buffers: ``out_bytes(v)`` lives on ``v``'s device from the start of ``v`` until its last local
  consumer and last outgoing transfer have finished; a received copy lives from its arrival
  until the last consumer on that device has finished. ``peak_memory`` is resident + the peak
  of the buffers.

Complexity: ``O((n + t) log(n + t))`` per sample for ``n`` nodes and ``t`` transfers.

Where it agrees with the cost model (tested in tests/test_sim.py): a placement on one device
runs for ``sum p`` = its max-load; with ``overlap=False``, zero latency, unit speeds and
``bandwidth=None`` every device is busy exactly its analytical load per sample, so one sample of
a pipelined chain takes the *sum* of the loads and a long stream takes *max-load* per sample.

Example
-------
>>> from devplace_lite.graph import Graph, Node
>>> from devplace_lite.devices import Cluster
>>> g = Graph([Node("a", p_acc=1, comm=0.5), Node("b", p_acc=2)], [("a", "b")])
>>> r = simulate(g, Cluster(accelerators=2), [0, 1])
>>> r.makespan, r.finish.tolist()
(3.5, [1.0, 3.5])

Reference: Addanki et al., "Placeto: Learning Generalizable Device Placement Algorithms for
Distributed Machine Learning", NeurIPS 2019 (their simulator: per-device queues, transfers on
the sender's link); Tarnawski et al., NeurIPS 2020 (the "calls" cost model).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass
from typing import Sequence, Union

import numpy as np

from .cost import Placement, as_assignment
from .devices import Cluster
from .errors import GraphError, UsageError
from .graph import Graph

PerDevice = Union[float, Sequence[float]]

# task kinds: compute, link transfer (overlap), send to host, receive from host (calls)
_COMPUTE, _LINK, _SEND, _RECV = 0, 1, 2, 3


def _per_device(value: PerDevice | None, D: int, name: str, positive: bool) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(D, float(arr))
    if arr.shape != (D,):
        raise UsageError(f"simulator parameter {name}: expected one value or {D} (one per device), got {arr.size}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0 if positive else arr < 0):
        raise UsageError(f"simulator parameter {name} must be {'positive' if positive else 'non-negative'} "
                         f"and finite, got {arr.tolist()}")
    return arr


@dataclass(frozen=True)
class SimParams:
    """The simulated cluster's physics (times in ms, bandwidth in bytes/s).

    ``speed``, ``bandwidth`` and ``latency`` take one value for all devices or one per device
    (accelerators first, then CPU cores). ``bandwidth=None`` uses each node's ``comm`` as the
    transfer time, as the cost model does.
    """

    speed: PerDevice = 1.0
    bandwidth: PerDevice | None = None
    latency: PerDevice = 0.0
    overhead: float = 0.0
    overlap: bool = True

    @classmethod
    def calls(cls) -> "SimParams":
        """The cost model's assumptions: no overlap, transfers charged at both ends, comm times."""
        return cls(overlap=False)

    def resolve(self, cluster: Cluster) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(speed, bandwidth or None, latency), one entry per device, checked."""
        D = cluster.size
        speed = _per_device(self.speed, D, "speed", positive=True)
        bw = None if self.bandwidth is None else _per_device(self.bandwidth, D, "bandwidth", positive=True)
        lat = _per_device(self.latency, D, "latency", positive=False)
        if not (math.isfinite(self.overhead) and self.overhead >= 0):
            raise UsageError(f"simulator parameter overhead must be non-negative and finite, got {self.overhead}")
        return speed, bw, lat

    def homogeneous(self, cluster: Cluster) -> bool:
        """Whether all accelerators are alike and all CPU cores are alike (devices interchangeable)."""
        k = cluster.k

        def alike(x: np.ndarray | None) -> bool:
            return x is None or bool(np.all(x[:k] == x[:1]) and np.all(x[k:] == x[-1:]))
        return all(alike(x) for x in self.resolve(cluster))

    def to_dict(self) -> dict:
        out = asdict(self)
        for key in ("speed", "bandwidth", "latency"):
            if isinstance(out[key], (tuple, list, np.ndarray)):
                out[key] = [float(x) for x in out[key]]
        return out


@dataclass
class SimResult:
    """What one simulation measured.

    ``makespan``: time at which the last task of the last sample ends (ms). ``per_sample``:
    the steady-state time per sample, measured over the second half of the stream (equals
    ``makespan`` for one sample). ``ready``/``start``/``finish``: per node, sample 0 (``ready``:
    when its last input arrived; ``start - ready`` is time spent queueing). ``busy``: total
    time each device's compute queue was occupied (all samples); ``link_busy``: the same for
    each outgoing link (``overlap=True``). ``peak_memory``: resident + peak transient bytes.
    ``transfers``: sample 0's transfers ``(node, from device, to device or -1 for host, start,
    end)``; ``sends``/``receives`` of ``overlap=False`` appear with the other end ``-1``.
    """

    makespan: float
    per_sample: float
    samples: int
    assignment: np.ndarray
    ready: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    busy: np.ndarray
    link_busy: np.ndarray
    peak_memory: np.ndarray
    transfers: list[tuple[int, int, int, float, float]]
    sample_finish: np.ndarray

    def tasks(self, graph: Graph, cluster: Cluster, labels: bool = True) -> list[tuple[str, float, float, str, str]]:
        """Sample 0 as Gantt boxes ``(lane, start, duration, label, colour)`` for `plot.gantt`:
        one lane per device, one per used link; transfers are grey."""
        from .devices import device_color

        names = cluster.names
        out = []
        for v in range(graph.n):
            d = int(self.assignment[v])
            out.append((names[d], float(self.start[v]), float(self.finish[v] - self.start[v]),
                        graph.nodes[v].id if labels else "", device_color(cluster, d)))
        for u, src, dst, t0, t1 in self.transfers:
            if dst >= 0 and src >= 0:  # a link transfer (overlap=True)
                lane = f"{names[src]} link"
            else:  # a send or receive occupying the device (overlap=False)
                lane = names[src if src >= 0 else dst]
            out.append((lane, t0, t1 - t0, f"{graph.nodes[u].id}>" if labels else "", "#dddddd"))
        return out

    def lanes(self, cluster: Cluster) -> list[str]:
        names = cluster.names
        used = sorted(set(int(d) for d in self.assignment))
        lanes = []
        for d in used:
            lanes.append(names[d])
            if any(src == d and dst >= 0 for _, src, dst, _, _ in self.transfers):
                lanes.append(f"{names[d]} link")
        return lanes


class Simulator:
    """A simulator bound to one graph, cluster and parameter set; counts its runs.

    Build it once and call `run` (full result) or `runtime` (one sample's makespan) for many
    placements: the per-graph tables are computed once. ``calls`` counts simulations, the
    currency in which search methods are compared.
    """

    def __init__(self, graph: Graph, cluster: Cluster, params: SimParams | None = None):
        self.graph, self.cluster = graph, cluster
        self.params = params or SimParams()
        speed, bw, lat = self.params.resolve(cluster)
        k, D = cluster.k, cluster.size
        base = np.where(np.arange(D)[None, :] < k, graph.p_acc[:, None], graph.p_cpu[:, None])
        with np.errstate(invalid="ignore"):
            dur = base / speed[None, :] + self.params.overhead
        dur[:, :k] = np.where(graph.supported[:, None], dur[:, :k], np.nan)
        self.durations = dur  #: (n, D) compute time of each node on each device; nan = not allowed
        if bw is None:
            xfer = graph.comm[:, None] + lat[None, :]
        else:
            xfer = graph.out_bytes[:, None] / bw[None, :] * 1e3 + lat[None, :]
        self.transfer_times = xfer  #: (n, D) time to move each node's output off / onto each device
        self._xfer = xfer.tolist()
        self._succ = graph.succ
        self._npred = [len(p) for p in graph.pred]
        pos = np.empty(graph.n, dtype=np.int64)
        pos[graph.topological_order()] = np.arange(graph.n)
        self._pos = pos.tolist()
        self._sources = [v for v in graph.topological_order().tolist() if not graph.pred[v]]
        self._bytes = graph.out_bytes.tolist()
        self.calls = 0

    def allowed(self) -> np.ndarray:
        """(n, D) bool: where each node may run."""
        return ~np.isnan(self.durations)

    def runtime(self, placement: Placement) -> float:
        """One sample's run time (makespan) in ms."""
        return self.run(placement, trace=False).makespan

    def run(self, placement: Placement, samples: int = 1, window: int | None = None,
            trace: bool = True) -> SimResult:
        """Simulate ``samples`` samples (all available at time 0, at most ``window`` in flight)."""
        g, cl = self.graph, self.cluster
        a = as_assignment(g, cl, placement)
        n, D, k = g.n, cl.size, cl.k
        if samples < 1:
            raise UsageError(f"samples must be at least 1, got {samples}")
        window = samples if window is None else int(window)
        if window < 1:
            raise UsageError(f"window must be at least 1, got {window}")
        dur_a = self.durations[np.arange(n), a]
        bad = np.flatnonzero(np.isnan(dur_a))
        if len(bad):
            raise GraphError(f"node {g.nodes[bad[0]].id} cannot run on {cl.names[a[bad[0]]]}")
        self.calls += 1
        al = a.tolist()
        dur = dur_a.tolist()
        xfer, succ, pred, pos, nbytes = self._xfer, self._succ, self.graph.pred, self._pos, self._bytes
        overlap = self.params.overlap
        # per node: local consumers, and the consumers on each other device
        local_n = [0] * n
        remote: list[dict[int, list[int]]] = [{} for _ in range(n)]
        for v in range(n):
            dv = al[v]
            for w in succ[v]:
                if al[w] == dv:
                    local_n[v] += 1
                else:
                    remote[v].setdefault(al[w], []).append(w)
        # transient buffers: reference counts per (sample, node) home copy and received copies
        live = [0.0] * D
        peak = [0.0] * D
        home_ref: dict[tuple[int, int], int] = {}
        copy_ref: dict[tuple[int, int, int], int] = {}

        missing: dict[tuple[int, int], int] = {}
        queues: list[list] = [[] for _ in range(2 * D)]  # 0..D-1 compute, D..2D-1 links
        idle = [True] * (2 * D)
        busy = [0.0] * (2 * D)
        events: list = []
        seq = 0
        arrived = [0.0] * n
        start = [0.0] * n
        finish = [0.0] * n
        transfers: list[tuple[int, int, int, float, float]] = []
        done_count = [0] * samples
        sample_finish = [0.0] * samples
        touched: set[int] = set()

        def ready(res: int, s: int, t: float, kind: int, v: int, b: int) -> None:
            heapq.heappush(queues[res], (s, t, pos[v], kind, v, b))
            touched.add(res)

        def release_sample(s: int, t: float) -> None:
            for v in self._sources:
                ready(al[v], s, t, _COMPUTE, v, -1)

        def deliver(v: int, s: int, b: int, t: float) -> None:
            """u's output of sample s has arrived on device b at time t."""
            ws = remote[v][b]
            if nbytes[v]:
                copy_ref[(s, v, b)] = len(ws)
                live[b] += nbytes[v]
                if live[b] > peak[b]:
                    peak[b] = live[b]
            for w in ws:
                key = (s, w)
                left = missing.get(key, self._npred[w]) - 1
                missing[key] = left
                if left == 0:
                    ready(al[w], s, t, _COMPUTE, w, -1)

        def unref_home(v: int, s: int) -> None:
            key = (s, v)
            home_ref[key] -= 1
            if home_ref[key] == 0:
                del home_ref[key]
                live[al[v]] -= nbytes[v]

        clock = 0.0
        for s in range(min(window, samples)):
            release_sample(s, 0.0)
        while True:
            for res in sorted(touched):
                if idle[res] and queues[res]:
                    s, t_ready, _, kind, v, b = heapq.heappop(queues[res])
                    now = t_ready if t_ready > clock else clock
                    if kind == _COMPUTE:
                        d_ = dur[v]
                        dv = al[v]
                        if nbytes[v]:
                            # readers of the home copy: local consumers + the transfers out of it
                            if overlap:
                                readers = sum(1 for bb in remote[v] if bb < k or dv < k)
                            else:
                                readers = 1 if (dv < k and remote[v]) else sum(1 for bb in remote[v] if bb < k)
                            refs = local_n[v] + readers
                            live[dv] += nbytes[v]
                            if live[dv] > peak[dv]:
                                peak[dv] = live[dv]
                            if refs:
                                home_ref[(s, v)] = refs
                        if s == 0:
                            start[v] = now
                            arrived[v] = t_ready
                    elif kind == _LINK or kind == _SEND:
                        d_ = xfer[v][al[v]]
                    else:
                        d_ = xfer[v][b]
                    idle[res] = False
                    busy[res] += d_
                    heapq.heappush(events, (now + d_, seq, res, kind, v, s, b, now))
                    seq += 1
            touched.clear()
            if not events:
                break
            clock = events[0][0]
            while events and events[0][0] == clock:
                t, _, res, kind, v, s, b, t0 = heapq.heappop(events)
                idle[res] = True
                touched.add(res)
                dv = al[v]
                if kind == _COMPUTE:
                    if s == 0:
                        finish[v] = t
                    done_count[s] += 1
                    if done_count[s] == n:
                        sample_finish[s] = t
                        if s + window < samples:
                            release_sample(s + window, t)
                    for w in succ[v]:
                        if al[w] == dv:
                            key = (s, w)
                            left = missing.get(key, self._npred[w]) - 1
                            missing[key] = left
                            if left == 0:
                                ready(dv, s, t, _COMPUTE, w, -1)
                    if nbytes[v] and (s, v) not in home_ref:
                        live[dv] -= nbytes[v]  # nobody reads it (a sink, or only CPU-to-CPU copies)
                    for u in pred[v]:
                        if not nbytes[u]:
                            continue
                        if al[u] == dv:
                            unref_home(u, s)
                        else:
                            key3 = (s, u, dv)
                            copy_ref[key3] -= 1
                            if copy_ref[key3] == 0:
                                del copy_ref[key3]
                                live[dv] -= nbytes[u]
                    for bb in sorted(remote[v]):
                        if overlap:
                            if dv >= k and bb >= k:
                                deliver(v, s, bb, t)  # CPU to CPU: shared host memory
                            else:
                                ready(D + dv, s, t, _LINK, v, bb)
                        elif dv >= k:
                            if bb < k:
                                ready(bb, s, t, _RECV, v, bb)
                            else:
                                deliver(v, s, bb, t)
                    if not overlap and dv < k and remote[v]:
                        ready(dv, s, t, _SEND, v, -1)
                elif kind == _LINK:
                    if s == 0:
                        transfers.append((v, dv, b, t0, t))
                    if nbytes[v]:
                        unref_home(v, s)
                    deliver(v, s, b, t)
                elif kind == _SEND:
                    if s == 0:
                        transfers.append((v, dv, -1, t0, t))
                    if nbytes[v]:
                        unref_home(v, s)
                    for bb in sorted(remote[v]):
                        if bb < k:
                            ready(bb, s, t, _RECV, v, bb)
                        else:
                            deliver(v, s, bb, t)
                else:  # _RECV
                    if s == 0:
                        transfers.append((v, -1, b, t0, t))
                    if dv >= k and nbytes[v]:
                        unref_home(v, s)  # read straight from the CPU's (host) memory
                    deliver(v, s, b, t)
        resident = np.bincount(a, weights=g.memory, minlength=D)[:D]
        sf = np.array(sample_finish)
        makespan = float(sf.max()) if n else 0.0
        if samples == 1:
            per = makespan
        else:
            h = samples // 2
            per = float((sf[-1] - sf[h - 1]) / (samples - h))
        return SimResult(makespan=makespan, per_sample=per, samples=samples, assignment=a,
                         ready=np.array(arrived), start=np.array(start), finish=np.array(finish),
                         busy=np.array(busy[:D]), link_busy=np.array(busy[D:]),
                         peak_memory=resident + np.array(peak), transfers=transfers if trace else [],
                         sample_finish=sf)


def simulate(graph: Graph, cluster: Cluster, placement: Placement, params: SimParams | None = None,
             samples: int = 1, window: int | None = None) -> SimResult:
    """Simulate a placement once (see the module docstring); a `Simulator` for repeated use."""
    return Simulator(graph, cluster, params).run(placement, samples=samples, window=window)
