"""Piper's model of a DNN to parallelize, read from (and built like) its JSON input format.

Problem: a layer DAG; for each layer ``v`` and tensor-parallel degree ``t`` a list of TMPCs
(tensor-model-parallel configurations; in practice "vanilla" and "activation recomputation"),
each with a compute time per sample ``p``, a parameter size ``w`` (bytes), memory
``a * y + b`` bytes with ``y`` the micro-batches in flight, and per cut edge a forward sync
``c_fw`` (incoming edges) or backward sync ``c_bw`` (outgoing edges), in bytes; each edge has a
transfer size ``c`` (bytes). The cluster: ``k`` devices with ``memory`` bytes each, a bandwidth
(bytes/s) per device, ``N`` micro-batches per batch. Format and model: Tarnawski, Narayanan,
Phanishayee, "Piper: Multidimensional Planner for DNN Parallelization", NeurIPS 2021, section 3,
and the README of msr-fiddle/piper (the format's fields keep their names here).

Reading checks everything the planner relies on, each failure one `GraphError` line: a DAG, ids
unique, every TMPC's sync maps naming exactly the layer's incoming / outgoing edges, no
negative number, at least one TMPC for ``t = 1`` or some ``t`` on every layer.

`repeat_layer` builds BERT-48/64/96 from BERT-32 by Piper's experiments' rule: each copy of a
transformer layer is spliced into the chain after the previous copy (the first after the
next-to-last transformer), keeping only the chain edges. Piper's program takes the layer to copy
from a C++ hash set, whose order moves the copies elsewhere once the set grows (from about the
25th copy on), and the 32 layers' times differ slightly: to plan exactly Piper's instance, read
the instance its own code builds (benchmarks/parallelize does).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

from ..errors import GraphError

#: Piper's own bound on a device count or tensor-parallel degree in a file.
MAX_DEVICES = 10_000


@dataclass(frozen=True)
class TMPC:
    """One way to run a layer on ``t`` devices (Piper's TMPC)."""

    name: str
    time_per_sample: float
    parameter_size: float
    memory_a: float
    memory_b: float
    sync_fw: dict[int, float]  # incoming edge's tail -> bytes
    sync_bw: dict[int, float]  # outgoing edge's head -> bytes


@dataclass(frozen=True)
class Layer:
    id: int
    name: str
    tmpcs: dict[int, tuple[TMPC, ...]]  # tensor-parallel degree -> its TMPCs


@dataclass(frozen=True)
class Model:
    """A layer DAG with its TMPCs and the cluster it is planned for (Piper's input)."""

    layers: tuple[Layer, ...]
    edges: tuple[tuple[int, int, float], ...]  # (tail id, head id, bytes)
    devices: int
    memory: float
    bandwidth: float
    microbatches: int
    extra: dict = field(default_factory=dict, compare=False)

    def with_cluster(self, devices: int | None = None, memory: float | None = None,
                     bandwidth: float | None = None, microbatches: int | None = None) -> "Model":
        """This model with the given cluster values replacing the file's (None keeps it)."""
        m = replace(self, devices=self.devices if devices is None else devices,
                    memory=self.memory if memory is None else memory,
                    bandwidth=self.bandwidth if bandwidth is None else bandwidth,
                    microbatches=self.microbatches if microbatches is None else microbatches)
        check_cluster(m)
        return m


def check_cluster(m: Model) -> None:
    """Raise GraphError when a cluster value is outside what the model means."""
    if not 1 <= m.devices <= MAX_DEVICES:
        raise GraphError(f"devices must be 1..{MAX_DEVICES}, got {m.devices}")
    if not (math.isfinite(m.memory) and m.memory > 0):
        raise GraphError(f"memory per device must be a positive number of bytes, got {m.memory}")
    if not (math.isfinite(m.bandwidth) and m.bandwidth > 0):
        raise GraphError(f"bandwidth must be a positive number of bytes per second, got {m.bandwidth}")
    if not 1 <= m.microbatches <= 1 << 20:
        raise GraphError(f"micro-batches per batch must be 1..{1 << 20}, got {m.microbatches}")


def _num(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise GraphError(f"{what} must be a non-negative number, got {x!r}")
    return float(x)


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x):
        raise GraphError(f"{what} must be an integer, got {x!r}")
    return int(x)


def _key(s: str, what: str) -> int:
    try:
        return int(s)
    except (TypeError, ValueError):
        raise GraphError(f"{what} key {s!r} is not an integer") from None


def _obj(x, what: str) -> dict:
    if not isinstance(x, dict):
        raise GraphError(f"{what} must be a JSON object")
    return x


def model_from_dict(d: dict) -> Model:
    """Build and check a `Model` from Piper's JSON object (see the module docstring).

    Raises
    ------
    GraphError
        On any missing field, wrong type, negative number, edge or sync entry that does not fit.
    """
    d = _obj(d, "the file")
    try:
        layers_json, edges_json = d["nodes"], d["edges"]
        devices = _int(d["maxDevices"], "maxDevices")
        memory = _num(d["maxMemoryPerDevice"], "maxMemoryPerDevice")
        bandwidth = _num(d["bandwidth"], "bandwidth")
        microbatches = _int(d.get("mbsInBatch", d.get("maxBatchSize")), "mbsInBatch")
    except KeyError as e:
        raise GraphError(f"missing field {e.args[0]!r}") from None
    if not isinstance(layers_json, list) or not layers_json:
        raise GraphError("nodes must be a non-empty list")
    if not isinstance(edges_json, list):
        raise GraphError("edges must be a list")
    ids: set[int] = set()
    edges: list[tuple[int, int, float]] = []
    raw: list[tuple[int, str, dict]] = []
    for n in layers_json:
        n = _obj(n, "a node")
        if "id" not in n or "TMPCs" not in n:
            raise GraphError("a node lacks 'id' or 'TMPCs'")
        v = _int(n["id"], "node id")
        if v in ids:
            raise GraphError(f"node id {v} appears twice")
        ids.add(v)
        raw.append((v, str(n.get("name", "")), _obj(n["TMPCs"], f"TMPCs of node {v}")))
    ins: dict[int, set[int]] = {v: set() for v in ids}
    outs: dict[int, set[int]] = {v: set() for v in ids}
    for e in edges_json:
        e = _obj(e, "an edge")
        try:
            u, v = _int(e["sourceId"], "sourceId"), _int(e["destId"], "destId")
            c = _num(e["communicationCost"], f"communicationCost of edge {e['sourceId']}->{e['destId']}")
        except KeyError as err:
            raise GraphError(f"an edge lacks {err.args[0]!r}") from None
        if u not in ids or v not in ids:
            raise GraphError(f"edge {u}->{v} names a node that is not in nodes")
        if u == v or v in outs[u]:
            raise GraphError(f"edge {u}->{v} is a self-loop or appears twice")
        outs[u].add(v)
        ins[v].add(u)
        edges.append((u, v, c))
    _check_acyclic(ids, outs)
    layers = []
    for v, name, tm in raw:
        by_t: dict[int, tuple[TMPC, ...]] = {}
        for ts, lst in tm.items():
            t = _key(ts, f"TMPCs of node {v}")
            if not 1 <= t <= MAX_DEVICES:
                raise GraphError(f"node {v}: tensor-parallel degree {t} outside 1..{MAX_DEVICES}")
            if not isinstance(lst, list):
                raise GraphError(f"node {v}: TMPCs for t={t} must be a list")
            opts, names = [], set()
            for o in lst:
                o = _obj(o, f"a TMPC of node {v}")
                try:
                    tname = str(o["id"])
                    fw = {_key(a, f"syncTimeFw of node {v}"): _num(b, f"syncTimeFw of node {v}")
                          for a, b in _obj(o["syncTimeFw"], "syncTimeFw").items()}
                    bw = {_key(a, f"syncTimeBw of node {v}"): _num(b, f"syncTimeBw of node {v}")
                          for a, b in _obj(o["syncTimeBw"], "syncTimeBw").items()}
                    opt = TMPC(tname, _num(o["timePerSample"], f"timePerSample of node {v}"),
                               _num(o["parameterSize"], f"parameterSize of node {v}"),
                               _num(o["memoryUsageA"], f"memoryUsageA of node {v}"),
                               _num(o["memoryUsageB"], f"memoryUsageB of node {v}"), fw, bw)
                except KeyError as err:
                    raise GraphError(f"a TMPC of node {v} lacks {err.args[0]!r}") from None
                if not tname or tname in names:
                    raise GraphError(f"node {v}, t={t}: TMPC id {tname!r} empty or repeated")
                names.add(tname)
                if set(fw) != ins[v] or set(bw) != outs[v]:
                    raise GraphError(f"node {v}, t={t}, TMPC {tname!r}: syncTimeFw/syncTimeBw must name "
                                     f"exactly the node's incoming/outgoing edges")
                opts.append(opt)
            if opts:
                by_t[t] = tuple(opts)
        if not by_t:
            raise GraphError(f"node {v} has no TMPC")
        layers.append(Layer(v, name, by_t))
    m = Model(tuple(layers), tuple(edges), devices, memory, bandwidth, microbatches)
    check_cluster(m)
    return m


def _check_acyclic(ids: set[int], outs: dict[int, set[int]]) -> None:
    indeg = {v: 0 for v in ids}
    for u in ids:
        for w in outs[u]:
            indeg[w] += 1
    stack = [v for v in ids if indeg[v] == 0]
    seen = 0
    while stack:
        u = stack.pop()
        seen += 1
        for w in outs[u]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    if seen != len(ids):
        raise GraphError("the layer graph has a cycle")


def read_model(path: str | os.PathLike) -> Model:
    """Read Piper's JSON input file (checked as `model_from_dict` does).

    Raises
    ------
    GraphError
        When the file is not JSON (in the words of `devplace_lite.io.read_json`, as every
        command reads a file) or not a valid model.
    """
    from ..io import read_json

    return model_from_dict(read_json(path))


def repeat_layer(model: Model, count: int, name: str = "ParallelTransformerLayer") -> Model:
    """The model with ``count`` layers named ``name``, grown as Piper's experiments grow BERT.

    Each new layer copies the TMPCs of the next-to-last ``name`` layer of the chain (one with a
    ``name`` predecessor and successor) and is spliced in after the previous copy, before the
    last ``name`` layer; it keeps only its two chain edges, both with the spliced edge's size.

    Examples
    --------
    >>> from devplace_lite.multidim.generate import random_model
    >>> m = random_model(0, layers=5, chain=True)
    >>> m = replace(m, layers=tuple(replace(x, name="T") for x in m.layers))
    >>> len(repeat_layer(m, 7, name="T").layers)
    7
    """
    named = [x.id for x in model.layers if x.name == name]
    if count < len(named):
        raise GraphError(f"the model already has {len(named)} layers named {name!r}, more than {count}")
    layers = {x.id: x for x in model.layers}
    edges = {(u, v): c for u, v, c in model.edges}
    nxt = {u: v for (u, v) in edges if u in named and v in named}
    prv = {v: u for u, v in nxt.items()}
    middle = [v for v in named if v in nxt and v in prv]
    if count > len(named) and not middle:
        raise GraphError(f"no {name!r} layer has a {name!r} predecessor and successor to copy")
    # the chain's next-to-last layer: the middle layer whose successor ends the chain
    v = next((x for x in middle if nxt[x] not in nxt), None) if middle else None
    fresh = max(layers) + 1
    for _ in range(count - len(named)):
        s, p = nxt[v], prv[v]
        c = edges.pop((v, s))
        nu = fresh
        fresh += 1
        edges[(v, nu)] = c
        edges[(nu, s)] = c
        lv, ls = layers[v], layers[s]
        layers[v] = replace(lv, tmpcs={t: tuple(replace(o, sync_bw={(nu if w == s else w): x for w, x in o.sync_bw.items()})
                                                for o in os_) for t, os_ in lv.tmpcs.items()})
        layers[s] = replace(ls, tmpcs={t: tuple(replace(o, sync_fw={(nu if u == v else u): x for u, x in o.sync_fw.items()})
                                                for o in os_) for t, os_ in ls.tmpcs.items()})
        layers[nu] = Layer(nu, name, {t: tuple(replace(o, sync_fw={v: o.sync_fw[p]}, sync_bw={s: o.sync_bw[s]})
                                               for o in os_) for t, os_ in lv.tmpcs.items()})
        nxt[v], nxt[nu], prv[nu], prv[s] = nu, s, v, nu
        v = nu
    return replace(model, layers=tuple(layers.values()), edges=tuple((u, w, c) for (u, w), c in edges.items()))


def model_to_dict(m: Model) -> dict:
    """Piper's JSON object for ``m`` (the inverse of `model_from_dict`)."""
    return {
        "maxDevices": m.devices, "maxMemoryPerDevice": m.memory, "bandwidth": m.bandwidth,
        "mbsInBatch": m.microbatches,
        "nodes": [{"id": x.id, "name": x.name, "TMPCs": {str(t): [
            {"id": o.name, "timePerSample": o.time_per_sample, "parameterSize": o.parameter_size,
             "memoryUsageA": o.memory_a, "memoryUsageB": o.memory_b,
             "syncTimeFw": {str(a): b for a, b in o.sync_fw.items()},
             "syncTimeBw": {str(a): b for a, b in o.sync_bw.items()}} for o in os_]
            for t, os_ in x.tmpcs.items()}} for x in m.layers],
        "edges": [{"sourceId": u, "destId": v, "communicationCost": c} for u, v, c in m.edges],
    }
