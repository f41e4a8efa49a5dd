"""A placement graph converted into Piper's model: a tiny graph checked by hand, the t = 1
variant equal to the graph's costs, a zoo transformer planned end to end, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from devplace_lite import load_graph
from devplace_lite.errors import GraphError, UsageError
from devplace_lite.generators import generate
from devplace_lite.graph import Graph, Node
from devplace_lite.multidim import evaluate
from devplace_lite.solve import parallelize
from devplace_lite.multidim.convert import from_graph, split_kinds
from devplace_lite.multidim.model import model_from_dict, model_to_dict

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ROOT / "data" / "graphs"


def tiny() -> Graph:
    """norm -> ff1 (Linear) -> act (GELU) -> ff2 (Linear), each with its backward node."""
    fw = [Node("norm", p_acc=1.0, memory=110.0, out_bytes=100.0, name="LayerNorm", color="norm"),
          Node("ff1", p_acc=4.0, memory=1400.0, out_bytes=400.0, name="Linear", color="ff1"),
          Node("act", p_acc=2.0, memory=400.0, out_bytes=400.0, name="GELU", color="act"),
          Node("ff2", p_acc=4.0, memory=1100.0, out_bytes=100.0, name="Linear", color="ff2")]
    bw = [Node(f"{v.id}.grad", p_acc=2 * v.p_acc, backward=True, color=v.color, name=f"{v.name}.grad") for v in fw]
    edges = [("norm", "ff1"), ("ff1", "act"), ("act", "ff2"),
             ("ff2.grad", "act.grad"), ("act.grad", "ff1.grad"), ("ff1.grad", "norm.grad")]
    edges += [(v.id, f"{v.id}.grad") for v in fw]
    return Graph(fw + bw, edges, name="tiny", meta={"batch": 4})


def _opt(m, layer: int, t: int, name: str = "vanilla"):
    return next(o for o in m.layers[layer].tmpcs[t] if o.name == name)


def test_tiny_graph_by_hand():
    g = tiny()
    assert split_kinds(g) == {"norm": "replicated", "ff1": "column", "act": "inner", "ff2": "row"}
    bw = 1e3  # bytes/s of the tensor-parallel links, so an all-reduce of S bytes at t=2 takes S/1000 s
    m = from_graph(g, degrees=(1, 2), tp_bandwidth=bw, state_factor=2.0)
    assert [x.name for x in m.layers] == ["norm", "ff1", "act", "ff2"]
    assert sorted(m.edges) == [(0, 1, 100.0), (1, 2, 400.0), (2, 3, 400.0)]
    assert m.extra["batch"] == 4
    # t = 1: forward + backward (3x the forward here), parameters = memory - output, b = 2 w, a = output
    for i, (p, w, out) in enumerate([(1.0, 10.0, 100.0), (4.0, 1000.0, 400.0), (2.0, 0.0, 400.0), (4.0, 1000.0, 100.0)]):
        o = _opt(m, i, 1)
        assert o.time_per_sample == pytest.approx(3 * p / 1e3)
        assert (o.parameter_size, o.memory_a, o.memory_b) == pytest.approx((w, out, 2 * w))
        assert set(o.sync_fw.values()) <= {0.0} and set(o.sync_bw.values()) <= {0.0}
        r = _opt(m, i, 1, "activation recomp")
        assert r.time_per_sample == pytest.approx(4 * p / 1e3)  # the forward once more
        assert (r.memory_a, r.memory_b) == pytest.approx((0.0, 2 * w + out))
    # t = 2: the layer norm is replicated (no change); ff1 halves and pays the backward all-reduce
    # of its input (100 bytes: 2 (t-1)/t * 100 / 1000 = 0.1 s); act halves, its output sharded;
    # ff2 halves and pays the forward all-reduce of its output (100 bytes, 0.1 s), output whole
    n2 = _opt(m, 0, 2)
    assert (n2.time_per_sample, n2.parameter_size, n2.memory_a) == pytest.approx((0.003, 10.0, 100.0))
    f1 = _opt(m, 1, 2)
    assert (f1.time_per_sample, f1.parameter_size, f1.memory_a, f1.memory_b) == pytest.approx((0.006 + 0.1, 500.0, 200.0, 1000.0))
    a2 = _opt(m, 2, 2)
    assert (a2.time_per_sample, a2.parameter_size, a2.memory_a) == pytest.approx((0.003, 0.0, 200.0))
    f2 = _opt(m, 3, 2)
    assert (f2.time_per_sample, f2.parameter_size, f2.memory_a) == pytest.approx((0.006 + 0.1, 500.0, 100.0))
    # recomputing ff2 at t = 2 runs its half forward and its all-reduce again
    r2 = _opt(m, 3, 2, "activation recomp")
    assert r2.time_per_sample == pytest.approx(0.106 + 0.002 + 0.1)
    # cut edges re-lay their tensor out at t > 1: the edge's bytes on both sides
    assert f1.sync_fw == {0: 100.0} and f1.sync_bw == {2: 400.0} and a2.sync_bw == {3: 400.0}


def test_attention_block_and_shared_input():
    """A layer-granularity attention block pays both all-reduces; q, k, v reading one tensor
    share one backward all-reduce (op granularity)."""
    g = Graph([Node("x", p_acc=1.0, out_bytes=300.0, name="LayerNorm"),
               Node("attn", p_acc=3.0, memory=900.0, out_bytes=300.0, name="SelfAttention")], [("x", "attn")])
    m = from_graph(g, degrees=(1, 4), tp_bandwidth=1.0, backward_factor=2.0, recompute=False)
    assert m.extra["kinds"] == {"x": "replicated", "attn": "block"}
    a = _opt(m, 1, 4)
    ar = 2 * 3 / 4 * 300.0
    assert a.time_per_sample == pytest.approx(9.0 / 4 / 1e3 + 2 * ar)
    assert (a.parameter_size, a.memory_a) == pytest.approx((150.0, 300.0))
    names = {"q": "Linear", "k": "Linear", "v": "Linear", "qk": "matmul", "sm": "softmax", "av": "matmul",
             "o": "Linear"}
    nodes = [Node("x", out_bytes=90.0, name="LayerNorm")] + [Node(i, p_acc=1.0, out_bytes=30.0, name=n) for i, n in names.items()]
    edges = [("x", "q"), ("x", "k"), ("x", "v"), ("q", "qk"), ("k", "qk"), ("qk", "sm"), ("sm", "av"), ("v", "av"),
             ("av", "o")]
    g = Graph(nodes, edges)
    assert split_kinds(g) == {"x": "replicated", "q": "column", "k": "column", "v": "column", "qk": "inner",
                              "sm": "inner", "av": "inner", "o": "row"}
    m = from_graph(g, degrees=(1, 2), tp_bandwidth=1.0, recompute=False)
    extra = [_opt(m, i, 2).time_per_sample - 3e-3 / 2 for i in (1, 2, 3)]
    assert extra == pytest.approx([90.0 / 3] * 3)  # 2 (t-1)/t = 1 at t=2: 90 bytes shared by three


def test_a_path_that_leaves_the_shardable_ops_keeps_the_linear_whole():
    # Linear -> add (a residual: needs the whole tensor) -> Linear: no split
    g = Graph([Node("a", name="Linear", out_bytes=1.0), Node("s", name="add", out_bytes=1.0),
               Node("b", name="Linear", out_bytes=1.0)], [("a", "s"), ("s", "b")])
    assert set(split_kinds(g).values()) == {"replicated"}
    # a shardable node that also reads a whole tensor drops its region
    g = Graph([Node("z", name="LayerNorm"), Node("a", name="Linear"), Node("m", name="mul"),
               Node("b", name="Linear")], [("z", "m"), ("a", "m"), ("m", "b")])
    assert set(split_kinds(g).values()) == {"replicated"}


def test_hugging_face_names_split_and_convolutions_do_not():
    hf = Graph([Node("a", name="Conv1D"), Node("g", name="NewGELUActivation"), Node("b", name="Conv1D")],
               [("a", "g"), ("g", "b")])
    assert split_kinds(hf) == {"a": "column", "g": "inner", "b": "row"}
    conv = Graph([Node("a", name="Conv1d"), Node("g", name="ReLU"), Node("b", name="Conv1d")], [("a", "g"), ("g", "b")])
    assert set(split_kinds(conv).values()) == {"replicated"}


def _check_t1_equals_graph(g: Graph) -> None:
    m = from_graph(g, degrees=(1, 2))
    fwd = [v for v in g.nodes if not v.backward]
    total = sum(v.p_acc for v in g.nodes) if g.is_training else 3 * sum(v.p_acc for v in fwd)
    assert sum(_opt(m, i, 1).time_per_sample for i in range(len(fwd))) == pytest.approx(total / 1e3)
    by_id = {v.id: v for v in fwd}
    for x, v in zip(m.layers, fwd):
        assert x.name == v.id
        o = _opt(m, x.id, 1)
        assert o.parameter_size == pytest.approx(max(0.0, v.memory - v.out_bytes))
        assert o.memory_a == pytest.approx(v.out_bytes if v.out_bytes > 0 else v.comm / 1e3 * 16e9)
        if g.is_training:
            bwd = sum(w.p_acc for w in g.nodes if w.backward and w.color == v.color)
            assert o.time_per_sample == pytest.approx((v.p_acc + bwd) / 1e3)
    ids = [v.id for v in fwd]
    want = sorted((ids.index(s), ids.index(t)) for s, t in g.edges if s in by_id and t in by_id)
    assert sorted((u, v) for u, v, _ in m.edges) == want
    for u, _, c in m.edges:
        assert c == pytest.approx(_opt(m, u, 1).memory_a)


@pytest.mark.parametrize("name", ["bert_layer_training", "gpt_layer_inference", "resnet50_layer_training",
                                  "gnmt_layer_training"])
def test_t1_variant_equals_the_zoo_graphs_costs(name):
    _check_t1_equals_graph(load_graph(GRAPHS / f"{name}.json"))


@settings(max_examples=25, deadline=None)
@given(family=st.sampled_from(["layered", "series_parallel", "skip_chain", "cells", "random"]),
       n=st.integers(3, 25), seed=st.integers(0, 10_000), training=st.booleans())
def test_t1_variant_equals_generated_graphs_costs(family, n, seed, training):
    _check_t1_equals_graph(generate(family, n, seed=seed, training=training))


def test_zoo_transformer_plans_end_to_end(tmp_path):
    g = load_graph(GRAPHS / "gpt_layer_training.json")
    m = from_graph(g, microbatches=8)
    assert m.extra["kinds"]["blocks_0_attention"] == "block"
    assert m.extra["kinds"]["blocks_0_fc"] == "column" and m.extra["kinds"]["blocks_0_proj"] == "row"
    # the model survives Piper's JSON format unchanged, so `devplace parallelize FILE` reads it
    d = model_to_dict(m)
    again = model_from_dict(json.loads(json.dumps(d)))
    assert again.layers == m.layers and again.edges == m.edges
    r = parallelize(m, devices=32, memory=2 * 2**30)
    assert r.status == "optimal"
    obj, stages, reason = evaluate(m.with_cluster(devices=32, memory=2 * 2**30), r.stages)
    assert reason is None and obj == pytest.approx(r.objective, rel=1e-9)
    assert sum(s.data_parallel * s.tensor_parallel for s in stages) <= 32
    assert all(s.memory <= 2 * 2**30 for s in stages)
    # with 8 micro-batches and 32 devices, data parallelism alone cannot use the devices
    assert max(s.tensor_parallel for s in stages) > 1 and any(s.recomputed for s in stages)
    for method in ("pipeline", "data", "equal"):
        b = parallelize(m, devices=32, memory=2 * 2**30, method=method)
        assert b.objective is None or b.objective >= r.objective * (1 - 1e-9)


def test_bad_input():
    g = tiny()
    with pytest.raises(UsageError, match="degrees"):
        from_graph(g, degrees=(2, 4))
    with pytest.raises(UsageError, match="tp_bandwidth"):
        from_graph(g, tp_bandwidth=0)
    with pytest.raises(GraphError, match="no forward node"):
        from_graph(Graph([Node("a"), Node("b", backward=True)], [("a", "b")]))
    with pytest.raises(GraphError, match="devices"):
        from_graph(g, devices=0)
    assert math.isclose(from_graph(g).memory, 16 * 2**30)


def test_a_profiled_torch_model_converts_and_plans():
    """The profiler's graph of a model written here (nothing of ours inside it: torch's own
    MultiheadAttention, Linear, GELU, LayerNorm), as `devplace profile` writes it."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from devplace_lite.pipeline.profile import profile

    class Block(nn.Module):
        def __init__(self, h: int = 32):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.att = nn.MultiheadAttention(h, 4, batch_first=True)
            self.fc, self.act, self.proj = nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h)

        def forward(self, x):
            y = self.n1(x)
            x = x + self.att(y, y, y, need_weights=False)[0]
            return x + self.proj(self.act(self.fc(self.n2(x))))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), Block(), Block(), nn.Linear(32, 10))
    g = profile(model, torch.randn(4, 8, 16), granularity="layer", spec="A100", training=True, progress=False)
    kinds = split_kinds(g)
    assert [kinds[f"_{b}_{x}"] for b in (1, 2) for x in ("att", "fc", "act", "proj", "n1")] == \
        ["block", "column", "inner", "row", "replicated"] * 2
    assert kinds["_0"] == kinds["_3"] == "replicated"  # a lone Linear has no partner to pair with
    _check_t1_equals_graph(g)
    m = from_graph(g, degrees=(1, 2, 4), devices=8, microbatches=4, memory=1e6)
    fc = next(x for x in m.layers if x.name == "_1_fc")
    # the column Linear's parameters split four ways: weight 32x128 and bias 128, float32
    assert _opt(m, fc.id, 1).parameter_size == pytest.approx(4 * (32 * 128 + 128))
    assert _opt(m, fc.id, 4).parameter_size == pytest.approx((32 * 128 + 128))
    r = parallelize(m)
    assert r.status == "optimal" and r.objective > 0


#: Linear three times as likely as any other name, so that pairs form (about a quarter of the graphs
#: of these two families get a column node, a tenth an inner one)
NAMES = ["Linear"] * 3 + ["GELU", "Dropout", "view", "matmul", "softmax", "add", "LayerNorm", "SelfAttention", "Conv2d"]


@settings(max_examples=150, deadline=None)
@given(family=st.sampled_from(["skip_chain", "series_parallel"]), n=st.integers(2, 14), seed=st.integers(0, 10_000),
       data=st.data())
def test_split_kinds_keep_megatrons_rules_on_random_graphs(family, n, seed, data):
    """On random DAGs with random operator names: a column node's every path forward reaches a
    row node through inner nodes only; an inner or row node reads sharded tensors only; and the
    t = 1 variant is still the graph's costs."""
    g0 = generate(family, n, seed=seed)
    names = data.draw(st.lists(st.sampled_from(NAMES), min_size=g0.n, max_size=g0.n))
    g = g0.with_nodes([Node(**{**v.__dict__, "name": nm, "out_bytes": 100.0 + i}) for i, (v, nm) in enumerate(zip(g0.nodes, names))])
    kind = {g.index[v]: k for v, k in split_kinds(g).items()}
    for v, k in kind.items():
        if k in ("inner", "row"):
            assert g.pred[v] and all(kind[u] in ("column", "inner") for u in g.pred[v]), (v, k)
        if k == "column":
            stack, seen = list(g.succ[v]), set()
            assert stack
            while stack:
                w = stack.pop()
                assert kind[w] in ("inner", "row"), (v, w, kind[w])
                if kind[w] == "inner" and w not in seen:
                    seen.add(w)
                    stack.extend(g.succ[w])
        if k in ("column", "row"):
            assert g.nodes[v].name == "Linear"
    _check_t1_equals_graph(g)
