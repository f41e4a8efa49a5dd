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

Reading is strict, because a misread file gives a wrong answer without a word: only regular
files up to `devplace_lite.files.MAX_INPUT_BYTES`, UTF-8, plain JSON (no ``NaN``); flags are
``true``/``false`` or ``1``/``0`` (the string ``"false"`` is an error, not true); counts are whole
numbers (``maxFPGAs: 2.7`` is an error, not 2); ids are non-empty strings or integers (``null``
is an error, not the node ``"None"``); ``defaults`` and ``meta`` are objects. Every refusal is one
`GraphError` line naming the file, the node or part, and the field.
"""

from __future__ import annotations

import gc
import io
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from .devices import Cluster
from .files import read_input, write_atomic
from .graph import Graph, GraphError, Node

FORMAT_NAME = "devplace-graph"
FORMAT_VERSION = 1

#: The native format's fields: name -> (type, required, meaning). Kept next to the code that
#: reads it so the documentation and the reader cannot drift apart (a test checks both).
NATIVE_SCHEMA: dict[str, tuple[str, bool, str]] = {
    "id": ("string or integer", True, "unique node id (an integer is read as its decimal string)"),
    "p_acc": ("number >= 0", True, "time on an accelerator, ms"),
    "p_cpu": ("number >= 0 or null", False, "time on one CPU core, ms; null or absent = not allowed on CPU"),
    "memory": ("number >= 0", False, "bytes held on the device (parameters, activations)"),
    "comm": ("number >= 0", False, "time to move this node's output between a device and host memory, ms"),
    "supported": ("bool or 0/1", False, "may run on an accelerator (default true)"),
    "backward": ("bool or 0/1", False, "a backward (gradient) node of a training graph (default false)"),
    "color": ("string, integer or null", False, "colocation class: nodes of one class share a device"),
    "name": ("string", False, "operator or layer name"),
    "out_bytes": ("number >= 0", False, "bytes of the node's output"),
    "flops": ("number >= 0", False, "floating-point operations (multiply-add = 2)"),
}


class _NotJson(ValueError):
    """A literal Python's parser takes but JSON does not (NaN, Infinity)."""


class _DuplicateKey(ValueError):
    """An object naming a key twice (valid JSON, but ambiguous)."""


def _refuse_constant(literal: str) -> None:
    raise _NotJson(f"{literal} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all distinct (Python's parser keeps the last of two silently:
    ``{"id": "a", "id": "b"}`` would be node b)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _DuplicateKey(f"the key {json.dumps(dup)} appears twice in one object: which one is meant?")
    return obj


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file; any failure becomes one line naming the file.

    Only a regular file of at most `MAX_INPUT_BYTES` is read (`devplace_lite.files.read_input`);
    the text must be UTF-8; a key given twice in one object (Python's parser would keep the last),
    ``NaN`` and ``Infinity`` (which it would take), integers of more digits than Python converts and nesting deeper than the parser's recursion limit are
    refused. A number too large for a float (``1e309``) reads as infinity, which every numeric
    field then refuses.

    Raises
    ------
    GraphError
        Unreadable, not UTF-8, not JSON.
    LimitError
        Larger than `MAX_INPUT_BYTES`.
    """
    try:  # the bytes are dropped as soon as decoded: a large file's text is not held twice
        text = read_input(path).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise GraphError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise GraphError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise GraphError(f"{path}: JSON nested deeper than the parser's limit "
                         f"(about {sys.getrecursionlimit()} levels)") from None
    except _NotJson as e:
        raise GraphError(f"{path}: not valid JSON ({e})") from None
    except _DuplicateKey as e:
        raise GraphError(f"{path}: {e}") from None
    except ValueError:  # the parser's int() refused a number of too many digits
        raise GraphError(f"{path}: not valid JSON (an integer of more than "
                         f"{sys.get_int_max_str_digits()} digits)") from None


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (`devplace_lite.files.write_atomic`).

    Raises
    ------
    GraphError
        ``obj`` holds NaN or an infinity (not JSON); nothing is written.
    """
    def dump(f) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8")
        json.dump(obj, text, indent=1, allow_nan=False)
        text.write("\n")
        text.flush()
        text.detach()  # write_atomic closes the file itself

    try:
        write_atomic(path, dump)
    except ValueError as e:  # raised mid-write: write_atomic has already dropped the partial file
        if isinstance(e, GraphError) or "JSON compliant" not in str(e):
            raise
        raise GraphError(f"cannot write {path}: the data holds NaN or an infinity, which JSON cannot hold") from None


def detect_format(obj: Any) -> str:
    """``"native"`` or ``"msr"``, from the content of a parsed file."""
    if isinstance(obj, dict):
        if obj.get("format") == FORMAT_NAME:
            return "native"
        nodes = obj.get("nodes")
        # an empty graph written as msr ({"nodes": [], "edges": []}) has no node to tell by
        if isinstance(nodes, list) and ("maxFPGAs" in obj or "edges" in obj and (not nodes and "format" not in obj or any(
                isinstance(v, dict) and "fpgaLatency" in v for v in nodes[:1]))):
            return "msr"
    raise GraphError("unrecognised graph format: expected a devplace-graph file or the authors' msr JSON")


# -- strict field readers: each names the record and the field it refuses --------------------
def _show(value: Any) -> str:
    """A value as the file wrote it (JSON), cut short: messages stay one line."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _field(rec: dict, key: str, where: str) -> Any:
    if key not in rec:
        raise GraphError(f"{where}: missing field '{key}'")
    return rec[key]


def _num(value: Any, where: str, key: str) -> float:
    """A finite number >= 0 (a JSON ``true`` is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GraphError(f"{where}: field '{key}' is not a number: {_show(value)}")
    try:
        x = float(value)
    except OverflowError:  # an integer beyond the float range
        x = math.inf
    if not math.isfinite(x):
        raise GraphError(f"{where}: field '{key}' is out of range (not a finite number): {_show(value)}")
    if x < 0:
        raise GraphError(f"{where}: field '{key}' is negative: {_show(value)}")
    return x


def _count(value: Any, where: str, key: str) -> int:
    """A whole number >= 0 (``2`` or ``2.0``; ``2.7`` and ``"2"`` are refused)."""
    x = _num(value, where, key)
    if x != int(x):
        raise GraphError(f"{where}: field '{key}' must be a whole number, got {_show(value)}")
    return int(value) if isinstance(value, int) else int(x)


def _flag(value: Any, where: str, key: str) -> bool:
    """``true``/``false`` or ``1``/``0``; any string (``"false"`` included) is refused."""
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise GraphError(f"{where}: field '{key}' must be true, false, 1 or 0, got {_show(value)}")


def _ident(value: Any, where: str, key: str) -> str:
    """A node id or class: a non-empty string or an integer (``null``, floats, lists are refused)."""
    if isinstance(value, str) and value or type(value) is int:
        return str(value)
    raise GraphError(f"{where}: field '{key}' must be a non-empty string or an integer, got {_show(value)}")


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise GraphError(f"{where}: field '{key}' must be a string, got {_show(value)}")
    return value


def _obj(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        kind = {type(None): "null", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")
        raise GraphError(f"{what} must be an object, got {kind}")
    return value


def _finite_tree(value: Any, where: str) -> Any:
    """``value`` (free-form ``meta``) checked to hold no non-finite number: it is written back as JSON."""
    stack = [value]
    while stack:
        x = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            raise GraphError(f"{where}: holds a number out of range: {x!r}")
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return value


def _list(obj: dict, key: str, where: str) -> list:
    value = _field(obj, key, where)
    if not isinstance(value, list):
        raise GraphError(f"{where}: '{key}' must be a list")
    return value


_NATIVE_TOP = {"format", "version", "name", "units", "defaults", "meta", "nodes", "edges"}
_DEFAULTS = {"accelerators": _count, "cpus": _count, "memory": _num}


def _native_defaults(value: Any) -> dict[str, Any]:
    d = _obj(value, "native graph: 'defaults'")
    unknown = set(d) - set(_DEFAULTS)
    if unknown:
        raise GraphError(f"native graph: 'defaults' has unknown field(s) {sorted(unknown)} "
                         f"(known: {', '.join(_DEFAULTS)})")
    out = {key: _DEFAULTS[key](x, "native graph: defaults", key) for key, x in d.items() if x is not None}
    if out.get("memory") == 0:
        raise GraphError("native graph: defaults: field 'memory' must be positive, got 0")
    return out


def _native_node(rec: Any, i: int) -> Node:
    """Node ``#i`` of a native file, every field checked; a refusal names the node and the field."""
    if not isinstance(rec, dict):
        raise GraphError(f"node #{i}: expected an object")
    nid = _ident(_field(rec, "id", f"node #{i}"), f"node #{i}", "id")
    where = f"node {nid}"
    unknown = set(rec) - set(NATIVE_SCHEMA)
    if unknown:
        raise GraphError(f"{where}: unknown field(s) {sorted(unknown)}")
    p_cpu, color = rec.get("p_cpu"), rec.get("color")
    return Node(
        id=nid,
        p_acc=_num(_field(rec, "p_acc", where), where, "p_acc"),
        p_cpu=None if p_cpu is None else _num(p_cpu, where, "p_cpu"),
        memory=_num(rec.get("memory", 0.0), where, "memory"),
        comm=_num(rec.get("comm", 0.0), where, "comm"),
        supported=_flag(rec.get("supported", True), where, "supported"),
        backward=_flag(rec.get("backward", False), where, "backward"),
        color=None if color is None else _ident(color, where, "color"),
        name=_text(rec.get("name", ""), where, "name"),
        out_bytes=_num(rec.get("out_bytes", 0.0), where, "out_bytes"),
        flops=_num(rec.get("flops", 0.0), where, "flops"),
    )


_NATIVE_KEYS = NATIVE_SCHEMA.keys()
_MAX_FLOAT = sys.float_info.max


def _plain_node(rec: Any) -> Node | None:
    """The node of a record whose every field has the common type (string id, float numbers,
    bool flags), checked with no per-field call or message; ``None`` sends any other record to
    `_native_node`, which accepts it or names what is wrong. Most of a large file's load time is
    spent here, once per node."""
    if type(rec) is not dict or not rec.keys() <= _NATIVE_KEYS:
        return None
    g = rec.get
    nid, p_acc, p_cpu, color, name = g("id"), g("p_acc"), g("p_cpu"), g("color"), g("name", "")
    memory, comm, out_bytes, flops = g("memory", 0.0), g("comm", 0.0), g("out_bytes", 0.0), g("flops", 0.0)
    supported, backward = g("supported", True), g("backward", False)
    # 0 <= x <= max float is false for NaN and infinities
    if (type(nid) is str and nid and type(name) is str
            and type(p_acc) is float and 0.0 <= p_acc <= _MAX_FLOAT
            and (p_cpu is None or type(p_cpu) is float and 0.0 <= p_cpu <= _MAX_FLOAT)
            and type(memory) is float and 0.0 <= memory <= _MAX_FLOAT
            and type(comm) is float and 0.0 <= comm <= _MAX_FLOAT
            and type(out_bytes) is float and 0.0 <= out_bytes <= _MAX_FLOAT
            and type(flops) is float and 0.0 <= flops <= _MAX_FLOAT
            and type(supported) is bool and type(backward) is bool
            and (color is None or type(color) is str and color)):
        return Node(nid, p_acc, p_cpu, memory, comm, supported, backward, color, name, out_bytes, flops)
    return None


def graph_from_native(obj: dict, name: str = "graph", *, consume: bool = False) -> Graph:
    """The graph of a parsed native file (`NATIVE_SCHEMA`), every field type-checked.

    ``consume=True`` lets the reader drop each node and edge record of ``obj`` once it is read
    (the caller gives ``obj`` up): a file's parsed tree and its graph then do not both live whole.

    Raises
    ------
    GraphError
        One line naming the node (or top-level part) and the field.
    """
    obj = _obj(obj, "native graph")
    version = obj.get("version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise GraphError(f"native graph: unsupported version {_show(version)} (this library reads version {FORMAT_VERSION})")
    unknown = set(obj) - _NATIVE_TOP
    if unknown:
        raise GraphError(f"native graph: unknown top-level field(s) {sorted(unknown)}")
    nodes_in, edges_in = _list(obj, "nodes", "native graph"), _list(obj, "edges", "native graph")
    nodes = []
    for i, rec in enumerate(nodes_in):
        nodes.append(_plain_node(rec) or _native_node(rec, i))
        if consume:
            nodes_in[i] = None
    edges = []
    for j, e in enumerate(edges_in):
        if type(e) is list and len(e) == 2 and type(e[0]) is str and e[0] and type(e[1]) is str and e[1]:
            edges.append((e[0], e[1]))
        elif not (isinstance(e, list) and len(e) == 2):
            raise GraphError(f"edge #{j}: expected [source, target], got {_show(e)}")
        else:
            edges.append((_ident(e[0], f"edge #{j}", "source"), _ident(e[1], f"edge #{j}", "target")))
        if consume:
            edges_in[j] = None
    if consume:
        nodes_in.clear()
        edges_in.clear()
    return Graph(nodes, edges, name=_text(obj.get("name", name), "native graph", "name"),
                 defaults=_native_defaults(obj.get("defaults", {})),
                 meta=_finite_tree(_obj(obj.get("meta", {}), "native graph: 'meta'"), "native graph: 'meta'"))


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
    """The graph of a parsed file in the authors' format, every field type-checked.

    Raises
    ------
    GraphError
        One line naming the node or edge and the field.
    """
    obj = _obj(obj, "msr graph")
    nodes_in, edges_in = _list(obj, "nodes", "msr graph"), _list(obj, "edges", "msr graph")
    comm: dict[str, float] = {}
    size: dict[str, float] = {}
    edges = []
    for j, e in enumerate(edges_in):
        if not isinstance(e, dict):
            raise GraphError(f"edge #{j}: expected an object")
        s = _ident(_field(e, "sourceId", f"edge #{j}"), f"edge #{j}", "sourceId")
        t = _ident(_field(e, "destId", f"edge #{j}"), f"edge #{j}", "destId")
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
        nid = _ident(_field(rec, "id", f"node #{i}"), f"node #{i}", "id")
        where = f"node {nid}"
        color = rec.get("colorClass")
        nodes.append(Node(
            id=nid,
            p_acc=_num(_field(rec, "fpgaLatency", where), where, "fpgaLatency"),
            p_cpu=_num(_field(rec, "cpuLatency", where), where, "cpuLatency"),
            memory=_num(rec.get("size", 0.0), where, "size"),
            comm=comm.get(nid, 0.0),
            supported=_flag(_field(rec, "supportedOnFpga", where), where, "supportedOnFpga"),
            backward=_flag(_field(rec, "isBackwardNode", where), where, "isBackwardNode"),
            color=None if color is None else _ident(color, where, "colorClass"),
            name=_text(rec.get("name", ""), where, "name"),
            out_bytes=size.get(nid, 0.0),
        ))
    defaults: dict[str, Any] = {}
    for src, dst in (("maxFPGAs", "accelerators"), ("maxCPUs", "cpus"), ("maxSizePerFPGA", "memory")):
        if src in obj:
            read = _num if dst == "memory" else _count
            defaults[dst] = read(obj[src], "msr graph", src)
    if defaults.get("memory") == 0:
        raise GraphError("msr graph: field 'maxSizePerFPGA' must be positive, got 0")
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
    """Read a graph file in either format (detected from its content).

    Raises
    ------
    GraphError
        One line naming the file, then the node or part and the field.
    LimitError
        The file is larger than `devplace_lite.files.MAX_INPUT_BYTES`.
    """
    # The collector is paused while millions of acyclic records are made: its full passes over a
    # growing heap cost a fifth of a large file's load and find nothing to free.
    enabled = gc.isenabled()
    gc.disable()
    try:
        obj = read_json(path)  # its messages name the file already
        try:
            if detect_format(obj) == "native":
                return graph_from_native(obj, Path(path).stem, consume=True)
            return graph_from_msr(obj, Path(path).stem)
        except GraphError as e:
            raise GraphError(f"{path}: {e}") from None
    finally:
        if enabled:
            gc.enable()


def save_graph(graph: Graph, path: str | os.PathLike, to: str = "native") -> None:
    """Write a graph atomically, ``to`` = ``"native"`` or ``"msr"``."""
    if to == "native":
        obj = graph_to_native(graph)
    elif to == "msr":
        obj = graph_to_msr(graph)
    else:
        raise GraphError(f"unknown output format {to!r} (expected native or msr)")
    write_json_atomic(path, obj)


def _expert_split(obj: dict, graph: Graph) -> dict[str, str]:
    """Node -> device of an expert file: ``fpgas`` / ``cpus`` lists of ``{"nodes": [ids]}``; the
    files list forward nodes only, so a backward node follows its colocation class."""
    out: dict[str, str] = {}
    for kind, prefix in (("fpgas", "acc"), ("cpus", "cpu")):
        parts = obj.get(kind, [])
        if not isinstance(parts, list):
            raise GraphError(f"expert split: '{kind}' must be a list of parts")
        for i, part in enumerate(parts):
            ids = part.get("nodes") if isinstance(part, dict) else None
            if not isinstance(ids, list):
                raise GraphError(f"expert split: {kind}[{i}] must be an object with a 'nodes' list")
            for nid in ids:
                nid = _ident(nid, f"expert split: {kind}[{i}]", "nodes")
                if nid in out:
                    raise GraphError(f"expert split: node {nid} is in {out[nid]} and in {prefix}{i}")
                out[nid] = f"{prefix}{i}"
    by_color = {graph.nodes[graph.index[n]].color: d for n, d in out.items()
                if n in graph.index and graph.nodes[graph.index[n]].color is not None}
    for v in graph.nodes:
        if v.id not in out and v.color in by_color:
            out[v.id] = by_color[v.color]
    return out


def _mapping(obj: dict) -> dict[str, str]:
    for key, dev in obj.items():
        if not isinstance(dev, str):
            raise GraphError(f"placement: node {key} must map to a device name (acc0.., cpu0..), got {_show(dev)}")
    return dict(obj)


def load_placement(path: str | os.PathLike, graph: Graph, cluster: Cluster) -> dict[str, str]:
    """Read a placement: our ``--json`` answer, a plain ``{node: device}``, or an expert split.

    Raises
    ------
    GraphError
        One line naming the file and what is wrong with its shape.
    """
    obj = read_json(path)
    try:
        if isinstance(obj, dict) and isinstance(obj.get("placement"), dict):
            return _mapping(obj["placement"])
        if isinstance(obj, dict) and ("fpgas" in obj or "cpus" in obj):
            return _expert_split(obj, graph)
        if isinstance(obj, dict) and all(isinstance(dev, str) for dev in obj.values()):
            return dict(obj)
    except GraphError as e:
        raise GraphError(f"{path}: {e}") from None
    raise GraphError(f"{path}: not a placement (expected {{node: device}}, a --json answer or an expert split)")
