"""Reading and writing graphs and placements.

Two graph formats are read and written, told apart by their content:

* the **native** format (``"format": "devplace-graph"``, versioned), documented in
  ``docs/graph-format.md`` and `NATIVE_SCHEMA`;
* the **msr** format published with Tarnawski et al. (NeurIPS 2020): top-level ``maxFPGAs``,
  ``maxCPUs``, ``maxSizePerFPGA``, ``nodes`` (``id``, ``supportedOnFpga``, ``cpuLatency``,
  ``fpgaLatency``, ``isBackwardNode``, optional ``colorClass``, ``size``) and ``edges``
  (``sourceId``, ``destId``, ``cost``). Its per-edge ``cost`` becomes the producer's ``comm``;
  times keep the file's numbers unchanged, so every load is the same in both formats.

Placements are read from our own ``--json`` answers, from a plain ``{node: device}`` object,
or from the authors' expert-split files (``fpgas`` / ``cpus`` lists of node ids).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .devices import Cluster
from .graph import Graph, GraphError, Node

FORMAT_NAME = "devplace-graph"
FORMAT_VERSION = 1

#: The native format's fields: name -> (type, required, meaning). Kept next to the code that
#: reads it so the documentation and the reader cannot drift apart (a test checks both).
NATIVE_SCHEMA: dict[str, tuple[str, bool, str]] = {
    "id": ("string", True, "unique node id"),
    "p_acc": ("number >= 0", True, "time on an accelerator, ms"),
    "p_cpu": ("number >= 0 or null", False, "time on one CPU core, ms; null or absent = not allowed on CPU"),
    "memory": ("number >= 0", False, "bytes held on the device (parameters, activations)"),
    "comm": ("number >= 0", False, "time to move this node's output between a device and host memory, ms"),
    "supported": ("bool", False, "may run on an accelerator (default true)"),
    "backward": ("bool", False, "a backward (gradient) node of a training graph (default false)"),
    "color": ("string or null", False, "colocation class: nodes of one class share a device"),
    "name": ("string", False, "operator or layer name"),
    "out_bytes": ("number >= 0", False, "bytes of the node's output"),
    "flops": ("number >= 0", False, "floating-point operations (multiply-add = 2)"),
}


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file; any failure becomes a one-line `GraphError` naming the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise GraphError(f"cannot read {p}: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphError(f"{p}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it: nothing half-written."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent or ".", prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def detect_format(obj: Any) -> str:
    """``"native"`` or ``"msr"``, from the content of a parsed file."""
    if isinstance(obj, dict):
        if obj.get("format") == FORMAT_NAME:
            return "native"
        if "nodes" in obj and ("maxFPGAs" in obj or "edges" in obj and any(
                isinstance(v, dict) and "fpgaLatency" in v for v in obj.get("nodes", [])[:1])):
            return "msr"
    raise GraphError("unrecognised graph format: expected a devplace-graph file or the authors' msr JSON")


def _field(rec: dict, key: str, where: str) -> Any:
    if key not in rec:
        raise GraphError(f"{where}: missing field '{key}'")
    return rec[key]


def _num(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GraphError(f"{where}: field '{key}' is not a number: {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise GraphError(f"{where}: field '{key}' is not finite: {value!r}")
    if x < 0:
        raise GraphError(f"{where}: field '{key}' is negative: {value!r}")
    return x


def graph_from_native(obj: dict, name: str = "graph") -> Graph:
    version = obj.get("version")
    if version != FORMAT_VERSION:
        raise GraphError(f"native graph: unsupported version {version!r} (this library reads version {FORMAT_VERSION})")
    nodes_in = _field(obj, "nodes", "native graph")
    edges_in = _field(obj, "edges", "native graph")
    if not isinstance(nodes_in, list) or not isinstance(edges_in, list):
        raise GraphError("native graph: 'nodes' and 'edges' must be lists")
    nodes = []
    for i, rec in enumerate(nodes_in):
        if not isinstance(rec, dict):
            raise GraphError(f"node #{i}: expected an object")
        nid = _field(rec, "id", f"node #{i}")
        where = f"node {nid}"
        unknown = set(rec) - set(NATIVE_SCHEMA)
        if unknown:
            raise GraphError(f"{where}: unknown field(s) {sorted(unknown)}")
        p_cpu = rec.get("p_cpu")
        nodes.append(Node(
            id=str(nid),
            p_acc=_num(_field(rec, "p_acc", where), where, "p_acc"),
            p_cpu=None if p_cpu is None else _num(p_cpu, where, "p_cpu"),
            memory=_num(rec.get("memory", 0.0), where, "memory"),
            comm=_num(rec.get("comm", 0.0), where, "comm"),
            supported=bool(rec.get("supported", True)),
            backward=bool(rec.get("backward", False)),
            color=None if rec.get("color") is None else str(rec["color"]),
            name=str(rec.get("name", "")),
            out_bytes=_num(rec.get("out_bytes", 0.0), where, "out_bytes"),
            flops=_num(rec.get("flops", 0.0), where, "flops"),
        ))
    edges = []
    for j, e in enumerate(edges_in):
        if not (isinstance(e, list) and len(e) == 2):
            raise GraphError(f"edge #{j}: expected [source, target], got {e!r}")
        edges.append((str(e[0]), str(e[1])))
    return Graph(nodes, edges, name=str(obj.get("name", name)), defaults=dict(obj.get("defaults", {})),
                 meta=dict(obj.get("meta", {})))


def graph_to_native(graph: Graph) -> dict:
    nodes = []
    for v in graph.nodes:
        rec: dict[str, Any] = {"id": v.id, "p_acc": v.p_acc, "p_cpu": v.p_cpu}
        for key, default in (("memory", 0.0), ("comm", 0.0), ("supported", True), ("backward", False),
                             ("color", None), ("name", ""), ("out_bytes", 0.0), ("flops", 0.0)):
            value = getattr(v, key)
            if value != default:
                rec[key] = value
        nodes.append(rec)
    defaults = {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in graph.defaults.items()}
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": graph.name,
            "units": {"time": "ms", "memory": "bytes", "bandwidth": "bytes/s"},
            "defaults": {k: v for k, v in defaults.items() if v is not None},
            "meta": graph.meta, "nodes": nodes, "edges": [list(e) for e in graph.edges]}


def graph_from_msr(obj: dict, name: str = "graph") -> Graph:
    nodes_in = _field(obj, "nodes", "msr graph")
    edges_in = _field(obj, "edges", "msr graph")
    if not isinstance(nodes_in, list) or not isinstance(edges_in, list):
        raise GraphError("msr graph: 'nodes' and 'edges' must be lists")
    comm: dict[str, float] = {}
    size: dict[str, float] = {}
    edges = []
    for j, e in enumerate(edges_in):
        if not isinstance(e, dict):
            raise GraphError(f"edge #{j}: expected an object")
        s = str(_field(e, "sourceId", f"edge #{j}"))
        t = str(_field(e, "destId", f"edge #{j}"))
        where = f"edge {s} -> {t}"
        c = _num(_field(e, "cost", where), where, "cost")
        if s in comm and comm[s] != c:
            raise GraphError(f"node {s}: out-edges have different costs ({comm[s]} and {c}); "
                             "the model has one communication cost per producer")
        comm[s] = c
        size[s] = max(size.get(s, 0.0), _num(e.get("size", 0.0), where, "size"))
        edges.append((s, t))
    nodes = []
    for i, rec in enumerate(nodes_in):
        if not isinstance(rec, dict):
            raise GraphError(f"node #{i}: expected an object")
        nid = str(_field(rec, "id", f"node #{i}"))
        where = f"node {nid}"
        color = rec.get("colorClass")
        nodes.append(Node(
            id=nid,
            p_acc=_num(_field(rec, "fpgaLatency", where), where, "fpgaLatency"),
            p_cpu=_num(_field(rec, "cpuLatency", where), where, "cpuLatency"),
            memory=_num(rec.get("size", 0.0), where, "size"),
            comm=comm.get(nid, 0.0),
            supported=bool(_field(rec, "supportedOnFpga", where)),
            backward=bool(_field(rec, "isBackwardNode", where)),
            color=None if color is None else str(color),
            name=str(rec.get("name", "")),
            out_bytes=size.get(nid, 0.0),
        ))
    defaults = {}
    for src, dst in (("maxFPGAs", "accelerators"), ("maxCPUs", "cpus"), ("maxSizePerFPGA", "memory")):
        if src in obj:
            defaults[dst] = _num(obj[src], "msr graph", src)
            if dst != "memory":
                defaults[dst] = int(defaults[dst])
    return Graph(nodes, edges, name=name, defaults=defaults,
                 meta={"source_format": "msr", "time_unit": "as published in the source file"})


def graph_to_msr(graph: Graph) -> dict:
    """The authors' format. Integer-like ids and colour classes are kept; others are numbered."""
    def intify(values: list[str]) -> dict[str, int]:
        try:
            out = {v: int(v) for v in values}
            if all(str(i) == v for v, i in out.items()):
                return out
        except ValueError:
            pass
        return {v: i for i, v in enumerate(dict.fromkeys(values))}

    ids = intify(graph.ids)
    colors = intify([v.color for v in graph.nodes if v.color is not None])
    nodes = []
    for v in graph.nodes:
        if v.p_cpu is None:
            raise GraphError(f"node {v.id}: the msr format cannot say 'not allowed on CPU' (p_cpu is null)")
        rec = {"name": v.name or f"node{v.id}", "id": ids[v.id], "supportedOnFpga": int(v.supported),
               "cpuLatency": v.p_cpu, "fpgaLatency": v.p_acc, "isBackwardNode": int(v.backward),
               "size": v.memory}
        if v.color is not None:
            rec["colorClass"] = colors[v.color]
        nodes.append(rec)
    edges = [{"sourceId": ids[s], "destId": ids[t], "cost": graph.node(s).comm, "size": graph.node(s).out_bytes}
             for s, t in graph.edges]
    out: dict[str, Any] = {}
    d = graph.defaults
    if "memory" in d and math.isfinite(d["memory"]):
        out["maxSizePerFPGA"] = float(d["memory"])
    if "accelerators" in d:
        out["maxFPGAs"] = int(d["accelerators"])
    if "cpus" in d:
        out["maxCPUs"] = int(d["cpus"])
    out.update(nodes=nodes, edges=edges)
    return out


def load_graph(path: str | os.PathLike) -> Graph:
    """Read a graph file in either format (detected from its content)."""
    obj = read_json(path)
    name = Path(path).stem
    try:
        fmt = detect_format(obj)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None
    return graph_from_native(obj, name) if fmt == "native" else graph_from_msr(obj, name)


def save_graph(graph: Graph, path: str | os.PathLike, to: str = "native") -> None:
    """Write a graph atomically, ``to`` = ``"native"`` or ``"msr"``."""
    if to == "native":
        obj = graph_to_native(graph)
    elif to == "msr":
        obj = graph_to_msr(graph)
    else:
        raise GraphError(f"unknown output format {to!r} (expected native or msr)")
    write_json_atomic(path, obj)


def load_placement(path: str | os.PathLike, graph: Graph, cluster: Cluster) -> dict[str, str]:
    """Read a placement: our ``--json`` answer, a plain ``{node: device}``, or an expert split."""
    obj = read_json(path)
    if isinstance(obj, dict) and isinstance(obj.get("placement"), dict):
        return {str(k): str(v) for k, v in obj["placement"].items()}
    if isinstance(obj, dict) and ("fpgas" in obj or "cpus" in obj):
        out: dict[str, str] = {}
        for kind, prefix in (("fpgas", "acc"), ("cpus", "cpu")):
            for i, part in enumerate(obj.get(kind, [])):
                for nid in part.get("nodes", []):
                    out[str(nid)] = f"{prefix}{i}"
        # expert files list forward nodes only; backward nodes follow their colocation class
        by_color = {graph.nodes[graph.index[n]].color: d for n, d in out.items()
                    if n in graph.index and graph.nodes[graph.index[n]].color is not None}
        for v in graph.nodes:
            if v.id not in out and v.color in by_color:
                out[v.id] = by_color[v.color]
        return out
    if isinstance(obj, dict) and all(isinstance(v, str) for v in obj.values()):
        return {str(k): v for k, v in obj.items()}
    raise GraphError(f"{path}: not a placement (expected {{node: device}}, a --json answer or an expert split)")
