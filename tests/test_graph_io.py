"""The graph model's checks, the two file formats and networkx interop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import reference_files
from devplace_lite.cost import evaluate
from devplace_lite.devices import Cluster
from devplace_lite.generators import FAMILIES, generate, with_backward
from devplace_lite.graph import Graph, GraphError, Node
from devplace_lite.io import (NATIVE_SCHEMA, graph_from_msr, graph_from_native, graph_to_msr, graph_to_native,
                              load_graph, load_placement, save_graph)


def test_cycle_error_names_a_node_on_the_cycle():
    nodes = [Node(x, p_acc=1) for x in "abcd"]
    with pytest.raises(GraphError, match=r"cycle through node [bcd]: .*->"):
        Graph(nodes, [("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")])


@pytest.mark.parametrize("field,value,msg", [
    ("p_acc", -1.0, "negative"), ("comm", float("nan"), "not finite"), ("memory", float("inf"), "not finite"),
    ("p_cpu", -2.0, "negative"),
])
def test_bad_numbers_name_node_and_field(field, value, msg):
    with pytest.raises(GraphError, match=rf"node x: field '{field}' is {msg}"):
        Graph([Node("x", **{field: value})], [])


def test_unknown_edge_endpoint_and_duplicates():
    with pytest.raises(GraphError, match="unknown target node zz"):
        Graph([Node("a")], [("a", "zz")])
    with pytest.raises(GraphError, match="duplicate id"):
        Graph([Node("a"), Node("a")], [])
    g = Graph([Node("a"), Node("b")], [("a", "b"), ("a", "b")])
    assert g.m == 1


def test_node_allowed_nowhere_is_rejected():
    with pytest.raises(GraphError, match="allowed on no device"):
        Graph([Node("a", supported=False, p_cpu=None)], [])


def test_native_missing_field_names_node_and_field():
    obj = graph_to_native(generate("layered", 6, seed=0))
    del obj["nodes"][3]["p_acc"]
    with pytest.raises(GraphError, match=rf"node {obj['nodes'][3]['id']}: missing field 'p_acc'"):
        graph_from_native(obj)


def test_msr_producer_with_two_costs_is_rejected():
    obj = graph_to_msr(generate("layered", 6, seed=0))
    src = obj["edges"][0]["sourceId"]
    obj["edges"].append({"sourceId": src, "destId": obj["nodes"][-1]["id"], "cost": 123.0})
    with pytest.raises(GraphError, match=rf"node {src}: out-edges have different costs"):
        graph_from_msr(obj)


def test_truncated_file(tmp_path):
    p = tmp_path / "g.json"
    save_graph(generate("cells", 12, seed=1), p)
    p.write_text(p.read_text()[:200])
    with pytest.raises(GraphError, match=r"g.json: not valid JSON"):
        load_graph(p)


def test_schema_document_lists_every_field():
    doc = (__import__("pathlib").Path(__file__).parent.parent / "docs" / "graph-format.md").read_text()
    for name in NATIVE_SCHEMA:
        assert f"`{name}`" in doc, name


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("training", [False, True])
def test_native_and_msr_round_trips_keep_loads(family, training, tmp_path):
    g = generate(family, 30, seed=4, training=training)
    c = Cluster(accelerators=3, cpus=1)
    a = np.random.default_rng(0).integers(0, c.size, g.n)
    for to in ("native", "msr"):
        save_graph(g, tmp_path / f"g.{to}.json", to=to)
        g2 = load_graph(tmp_path / f"g.{to}.json")
        assert g2.ids == g.ids if to == "native" else g2.n == g.n
        np.testing.assert_array_equal(evaluate(g2, c, a).loads, evaluate(g, c, a).loads)


def test_empty_graph_round_trips_through_msr(tmp_path):
    """An empty graph saved as msr is {"nodes": [], "edges": []}: no node says which format it
    is, and the reader refused the file the writer had just written."""
    save_graph(Graph([], []), tmp_path / "e.json", to="msr")
    assert load_graph(tmp_path / "e.json").n == 0
    (tmp_path / "f.json").write_text('{"format": "other", "nodes": [], "edges": []}')
    with pytest.raises(GraphError, match="unrecognised graph format"):
        load_graph(tmp_path / "f.json")


def test_networkx_round_trip():
    g = with_backward(generate("skip_chain", 10, seed=2))
    g2 = Graph.from_networkx(g.to_networkx())
    assert g2.nodes == g.nodes and g2.edges == g.edges


@pytest.mark.parametrize("path", reference_files("throughput-inputs") + reference_files("latency-inputs"),
                         ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.stem}")
def test_reference_workload_imports_validates_and_round_trips(path, reference_dir, tmp_path):
    raw = json.loads(path.read_text())
    g = load_graph(path)
    assert g.n == len(raw["nodes"]) and g.m == len({(e["sourceId"], e["destId"]) for e in raw["edges"]})
    c = Cluster.for_graph(g)
    assert (c.k, c.l, c.memory) == (raw["maxFPGAs"], raw["maxCPUs"], raw["maxSizePerFPGA"])
    rng = np.random.default_rng(1)
    placements = [rng.integers(0, c.size, g.n) for _ in range(3)] + [np.zeros(g.n, dtype=int)]
    save_graph(g, tmp_path / "native.json")
    back = load_graph(tmp_path / "native.json")
    save_graph(back, tmp_path / "msr.json", to="msr")
    again = load_graph(tmp_path / "msr.json")
    for a in placements:
        ref = evaluate(g, c, a)
        for other in (back, again):
            ev = evaluate(other, Cluster.for_graph(other), a)
            np.testing.assert_array_equal(ev.loads, ref.loads)
            assert ev.split == ref.split and ev.violations == ref.violations


def test_expert_split_reads_and_backward_nodes_follow_their_class(reference_dir):
    g = load_graph(reference_dir / "throughput-inputs/LayerGraphs/gnmt_training.json")
    c = Cluster.for_graph(g)
    p = load_placement(reference_dir / "human-experts/gnmt_training_expert.json", g, c)
    ev = evaluate(g, c, p)
    assert len(p) == g.n and ev.feasible and ev.split == "chain"


def test_common_records_read_as_the_strict_reader_reads_them():
    """The loader's one-test path (`_plain_node`) takes a record only when it reads it exactly as
    the field-by-field reader does; any other record goes to that reader."""
    from devplace_lite.io import _native_node, _plain_node

    obj = graph_to_native(with_backward(generate("cells", 30, seed=2)))
    recs = obj["nodes"]
    recs[0].update(p_acc=3, memory=0, supported=1, backward=0)  # integers and 0/1 flags
    recs[1].update(id=7001, color=5)                              # integer id and class
    recs[2].update(p_cpu=None, flops=2.5e9, name="")
    recs[3].update(comm=1.7976931348623157e308)                  # the largest float
    plain = [_plain_node(r) for r in recs]
    assert plain[0] is None and plain[1] is None and plain[2] is not None and plain[3] is not None
    assert sum(p is not None for p in plain) > len(recs) // 2    # the common case takes the one test
    for i, (rec, p) in enumerate(zip(recs, plain)):
        assert p is None or p == _native_node(rec, i)
    for bad in ({"p_acc": float("nan")}, {"memory": -0.5}, {"supported": "false"}, {"color": ""}, {"id": ""},
                {"extra": 1}, {"backward": None}, {"name": 3}):
        rec = {**recs[2], **bad}
        assert _plain_node(rec) is None
        with pytest.raises(GraphError):
            _native_node(rec, 2)


def test_loading_consumes_only_a_tree_given_up():
    obj = graph_to_native(generate("layered", 40, seed=3))
    copy = json.loads(json.dumps(obj))
    g = graph_from_native(obj)
    assert obj == copy  # a caller's tree is left as it was
    h = graph_from_native(obj, consume=True)
    assert obj["nodes"] == [] and obj["edges"] == []
    assert h.ids == g.ids and h.edges == g.edges and np.array_equal(h.p_acc, g.p_acc)
