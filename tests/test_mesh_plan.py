"""The plan of a dp x pp x tp mesh: least forecast step over shapes, schedules and splits (an
exhaustive search written here over every shape and every split), its bound below every plan,
its degrees fixed on request, and the library and the command line answering alike."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from devplace_lite.errors import GraphError, UsageError
from devplace_lite.graph import Graph, Node
from devplace_lite.pipeline.mesh_plan import at_degree, dp_allreduce_ms, plan_mesh, shapes
from devplace_lite.pipeline.costs import segment_costs
from devplace_lite.schedules.search import evaluate
from devplace_lite.schedules.simulate import stage_to_rank, stages_per_rank

HOST = 16e9


def _graph(rng: np.random.Generator, n: int, training: bool = True) -> Graph:
    """A random chain of ``n`` measured segments, shaped as `segments.segment_graph` makes them."""
    names = [f"layers.{i}" for i in range(n)]
    ids = [f"{i}:{nm}" for i, nm in enumerate(names)]
    f = rng.uniform(0.2, 3.0, n).round(3).tolist()
    b = [x * rng.uniform(1.2, 2.5) for x in f]
    bi = [x * rng.uniform(0.3, 0.7) for x in b]
    params = [float(x) * 1e6 for x in rng.integers(1, 200, n)]
    acts = [float(x) * 1e5 for x in rng.integers(1, 100, n)]
    sent = [float(x) * 1e5 for x in rng.integers(1, 50, n)]
    nodes = [Node(id="input:0", comm=1e5 / HOST * 1e3, out_bytes=1e5)]
    nodes += [Node(id=ids[i], p_acc=f[i], p_cpu=f[i], memory=params[i] + acts[i], comm=sent[i] / HOST * 1e3,
                   out_bytes=sent[i], name=names[i], color=ids[i] if training else None) for i in range(n)]
    edges = [("input:0", ids[0])] + [(ids[i], ids[i + 1]) for i in range(n - 1)]
    if training:
        nodes += [Node(id=f"{ids[i]}.grad", p_acc=b[i], p_cpu=b[i], memory=params[i], comm=sent[i] / HOST * 1e3,
                       out_bytes=sent[i], backward=True, color=ids[i], name=f"{names[i]}.grad") for i in range(n)]
        edges += [(f"{ids[i + 1]}.grad", f"{ids[i]}.grad") for i in range(n - 1)] + [(v, f"{v}.grad") for v in ids]
    meta = {"model": "random", "batch": 1, "granularity": "block", "training": training,
            "spec": {"name": "cpu-measured", "link": HOST},
            "segments": {"names": names, "forward_ms": f, "backward_ms": b if training else [0.0] * n,
                         "backward_input_ms": bi if training else None, "param_bytes": params,
                         "grad_bytes": params if training else [0.0] * n, "activation_bytes": acts,
                         "output_bytes": [1e4] * n, "shared_saves": []}}
    return Graph(nodes, edges, name="random-segments", meta=meta)


def _shares(rng: np.random.Generator, graph: Graph) -> dict[str, list[float]]:
    n = len(graph.meta["segments"]["names"])
    groups = rng.integers(0, 3, n).astype(float).tolist()
    return {"share": [float(rng.uniform(0.3, 0.95)) if g else 0.0 for g in groups],
            "param_bytes": [p * float(rng.uniform(0.5, 1.0)) if g else 0.0
                            for p, g in zip(graph.meta["segments"]["param_bytes"], groups)],
            "groups": groups, "forward_bytes": [g * 2e5 for g in groups], "backward_bytes": [g * 2e5 for g in groups]}


def _exhaustive(graph, shares, devices, degrees, m, schedules, memory=None):
    """The least (step, dp, pp, tp, schedule) over every mesh of ``devices`` and every split,
    replayed one by one; None where nothing fits."""
    best = None
    n = len(graph.meta["segments"]["names"])
    for schedule in schedules:
        v = stages_per_rank(schedule)
        for tp in degrees:
            for pp in range(1, devices + 1):
                if devices % (tp * pp):
                    continue
                dp = devices // (tp * pp)
                if m % dp or pp * v > n or (schedule == "1f1b" and m // dp < pp):
                    continue
                g = at_degree(graph, shares, tp, HOST)
                c = segment_costs(g, "none", m // dp)
                grads = g.meta["segments"]["grad_bytes"]
                ranks = stage_to_rank(schedule, pp, v)
                for cuts in itertools.combinations(range(1, n), pp * v - 1):
                    try:
                        sim = evaluate(c, list(cuts), schedule, pp, m // dp, v, training=graph.is_training)
                    except UsageError:
                        continue
                    if memory is not None and max(sim.rank_peak_bytes) > memory:
                        continue
                    bounds = [0, *cuts, n]
                    held = [0.0] * pp
                    for s in range(pp * v):
                        held[ranks[s]] += sum(grads[bounds[s]:bounds[s + 1]])
                    step = sim.step_ms + dp_allreduce_ms(max(held), dp, HOST)
                    if best is None or step < best[0]:
                        best = (step, dp, pp, tp, schedule)
    return best


@pytest.mark.parametrize("seed", range(120))
def test_mesh_plan_is_the_least_step_over_every_shape_and_split(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 6))
    graph = _graph(rng, n, training=bool(seed % 5))
    shares = _shares(rng, graph)
    devices = int(rng.choice([2, 4, 8]))
    m = int(rng.choice([4, 8]))
    schedules = ["1f1b", "gpipe"] if seed % 3 else ["1f1b", "interleaved-1f1b"]
    best = _exhaustive(graph, shares, devices, [1, 2], m, schedules)
    p = plan_mesh(graph, shares, devices=devices, degrees=[1, 2], microbatches=m, batch=m, schedules=schedules,
                  recompute="never")
    mesh = p.mesh
    assert mesh["bound_ms"] <= best[0] * (1 + 1e-9)  # the bound holds below every plan
    assert mesh["step_ms"] >= best[0] * (1 - 1e-9)
    if mesh["status"] == "optimal":
        assert mesh["step_ms"] == pytest.approx(best[0])
    else:  # only the data all-reduce's bound is loose: the gap says by how much at most
        assert mesh["status"] == "feasible" and mesh["step_ms"] * (1 - mesh["gap"]) == pytest.approx(mesh["bound_ms"])
    # the plan is the shape it names: its own replay plus its all-reduce is the step it states
    assert p.dp * p.ranks * p.tp == devices
    assert p.step_ms() + mesh["allreduce_ms"] == pytest.approx(mesh["step_ms"])


@pytest.mark.parametrize("seed", range(40))
def test_a_memory_cap_is_honoured_and_the_least_fitting_mesh_kept(seed):
    rng = np.random.default_rng(1000 + seed)
    graph = _graph(rng, int(rng.integers(3, 6)))
    shares = _shares(rng, graph)
    total = sum(graph.meta["segments"]["param_bytes"]) * 2
    cap = float(total * rng.uniform(0.25, 0.9))
    best = _exhaustive(graph, shares, 4, [1, 2], 4, ["1f1b"], memory=cap)
    if best is None:
        with pytest.raises(GraphError, match="fits"):
            plan_mesh(graph, shares, devices=4, degrees=[1, 2], microbatches=4, batch=4, memory=cap,
                      recompute="never")
        return
    p = plan_mesh(graph, shares, devices=4, degrees=[1, 2], microbatches=4, batch=4, memory=cap, recompute="never")
    assert max(m["peak"] for m in p.stage_memory()) <= cap
    assert p.mesh["bound_ms"] <= best[0] * (1 + 1e-9) <= p.mesh["step_ms"] * (1 + 1e-9)
    if p.mesh["status"] == "optimal":
        assert p.mesh["step_ms"] == pytest.approx(best[0])


def test_degree_one_is_the_graph_and_degree_t_scales_what_it_splits():
    rng = np.random.default_rng(7)
    graph = _graph(rng, 4)
    shares = _shares(rng, graph)
    assert at_degree(graph, shares, 1, HOST) is graph
    g2 = at_degree(graph, shares, 2, HOST, message_ms=0.5)
    s1, s2 = graph.meta["segments"], g2.meta["segments"]
    for i in range(4):
        keep = 1 - shares["share"][i] / 2
        extra = (2 * 0.5 * shares["forward_bytes"][i] / HOST * 1e3) + shares["groups"][i] * 0.5
        assert s2["forward_ms"][i] == pytest.approx(s1["forward_ms"][i] * keep + extra)
        assert s2["param_bytes"][i] == pytest.approx(s1["param_bytes"][i] - shares["param_bytes"][i] / 2)
        assert s2["activation_bytes"][i] == s1["activation_bytes"][i]  # counted whole: an upper bound
    assert g2.nodes[1].p_acc == pytest.approx(s2["forward_ms"][0], abs=1e-6)


def test_fixed_degrees_and_refusals_are_one_line():
    rng = np.random.default_rng(3)
    graph = _graph(rng, 4)
    shares = _shares(rng, graph)
    p = plan_mesh(graph, shares, devices=8, degrees=[1, 2], microbatches=8, batch=8, fixed={"tp": 2, "pp": 2})
    assert (p.dp, p.ranks, p.tp) == (2, 2, 2)
    assert all(r["tp"] == 2 and r["pp"] == 2 for r in p.mesh["tried"])
    with pytest.raises(UsageError, match="no dp x pp x tp mesh of 8 device"):
        plan_mesh(graph, shares, devices=8, degrees=[1], microbatches=1, batch=1, fixed={"pp": 2})
    assert [(s.dp, s.pp, s.tp) for s in shapes(6, [1, 2, 3], 6, 8, ["1f1b"])] == \
        [(6, 1, 1), (3, 2, 1), (2, 3, 1), (1, 6, 1), (3, 1, 2), (1, 3, 2), (2, 1, 3), (1, 2, 3)]


def test_library_and_command_line_give_the_same_plan(tmp_path, capsys):
    """`dl.plan(..., devices=N)` and `devplace plan --devices N` answer alike, on a roofline
    (deterministic: no timing enters)."""
    import devplace_lite as dl
    from devplace_lite.cli import main
    from devplace_lite.zoo import load

    spec = "devplace_lite.zoo.external:qwen2"
    model, inputs = load(spec, batch=8, seed=0)
    p = dl.plan(model, inputs, devices=8, spec="H100", memory=2**30, model_spec=spec)
    assert main(["plan", spec, "--devices", "8", "--spec", "H100", "--memory", str(2**30), "--batch", "8",
                 "--out", str(tmp_path), "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert (a["dp"], a["ranks"], a["tp"], a["schedule"], a["split_points"]) == \
        (p.dp, p.ranks, p.tp, p.schedule, p.split_points)
    assert (a["status"], a["mesh"]["step_ms"], a["mesh"]["bound_ms"]) == (p.status, p.mesh["step_ms"],
                                                                          p.mesh["bound_ms"])
    script = (tmp_path / "run_pipeline.py").read_text()
    assert "devplace_lite.pipeline.mesh_run" in script and f"'--tp', '{p.tp}'" in script


@pytest.mark.parametrize("argv, words", [
    (["-k", "2", "--devices", "8"], "one of them"),
    (["--tp", "2"], "give --devices"),
    (["--devices", "8", "--stages-per-rank", "2", "--schedule", "interleaved-1f1b"], "--stages-per-rank"),
    (["--devices", "8", "--schedule", "zbv", "--run"], "gpipe or 1f1b"),
    (["--devices", "8", "--tp", "3"], "degree 3"),
    (["--devices", "8", "--inference", "--run"], "--inference without --run"),
    (["--devices", "1", "--run", "--check"], "one device splits nothing"),
])
def test_command_line_refusals(argv, words, tmp_path, capsys):
    from devplace_lite.cli import main

    assert main(["plan", "devplace_lite.zoo.external:llama", *argv, "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert not (tmp_path / "p").exists()


def test_no_mesh_of_too_few_microbatches():
    rng = np.random.default_rng(5)
    graph = _graph(rng, 3)
    with pytest.raises(UsageError, match="micro-batch"):
        plan_mesh(graph, _shares(rng, graph), devices=4, degrees=[1], microbatches=1, batch=1, fixed={"dp": 4})
    assert math.isfinite(plan_mesh(graph, _shares(rng, graph), devices=1, degrees=[1], microbatches=1,
                                   batch=1).mesh["step_ms"])


def test_an_untuned_family_runs_its_mesh_plan_with_tensor_parallelism_equal_to_the_model(tmp_path, capsys):
    """Mistral (never used to tune the tensor-parallel search or the runner), as a user types it:
    `devplace plan MODEL --devices 8 --tp 2 --pp 2 --run --check` on 8 processes (gloo)."""
    from devplace_lite.cli import main

    code = main(["plan", "devplace_lite.zoo.external:mistral", "--devices", "8", "--tp", "2", "--pp", "2", "--run",
                 "--check", "--steps", "1", "--out", str(tmp_path), "--json"])
    a = json.loads(capsys.readouterr().out)
    assert code == 0 and a["success"]
    assert (a["dp"], a["ranks"], a["tp"]) == (2, 2, 2) and len(a["split_points"]) == 1
    c = a["run"]["check"]
    assert c["passed"] and c["sharded_checked"] > 0
    assert sorted(tuple(r["coords"]) for r in a["run"]["ranks"]) == sorted(itertools.product(range(2), repeat=3))
    # each stage splits its own groups: the two stages' tensor-parallel modules are disjoint, none empty
    mods = [{m for r in a["run"]["ranks"] if r["coords"][1] == p for m in r["tp_modules"]} for p in (0, 1)]
    assert all(mods) and not mods[0] & mods[1]
