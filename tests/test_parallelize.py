"""Piper's multidimensional planner: exact against an exhaustive search, baselines, bad input, CLI."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import given, settings, strategies as st

from devplace_lite.errors import GraphError, UsageError
from devplace_lite.methods import PARALLELIZE
from devplace_lite.multidim import evaluate, planner
from devplace_lite.solve import parallelize
from devplace_lite.multidim.generate import random_model
from devplace_lite.multidim.model import model_from_dict, model_to_dict, repeat_layer
from devplace_lite.multidim.plan import Stage


def _first_stages(layers: frozenset, preds: dict) -> list[frozenset]:
    """Non-empty subsets of ``layers`` closed under predecessors within ``layers``."""
    out = []
    items = sorted(layers)
    for r in range(1, len(items) + 1):
        for c in itertools.combinations(items, r):
            s = frozenset(c)
            if all(u in s for v in s for u in preds[v] if u in layers):
                out.append(s)
    return out


def _chains(layers: frozenset, preds: dict):
    if not layers:
        yield []
        return
    for s in _first_stages(layers, preds):
        for rest in _chains(layers - s, preds):
            yield [s, *rest]


def exhaustive(model) -> float | None:
    """The least time per sample over every plan, by enumeration (only for tiny models)."""
    preds = {x.id: set() for x in model.layers}
    for u, v, _ in model.edges:
        preds[v].add(u)
    by_id = {x.id: x for x in model.layers}
    N, K = model.microbatches, model.devices
    best = None
    for chain in _chains(frozenset(preds), preds):
        degs = [[(d, t) for t in sorted(set.intersection(*(set(by_id[v].tmpcs) for v in s)))
                 for d in range(1, N + 1) if N % d == 0 and d * t <= K] for s in chain]
        for dt in itertools.product(*degs):
            if sum(d * t for d, t in dt) > K or sum(d for d, _ in dt) > min(N, K):
                continue
            layers = [v for s in chain for v in sorted(s)]
            choices = [[o.name for o in by_id[v].tmpcs[t]] for s, (_, t) in zip(chain, dt) for v in sorted(s)]
            for pick in itertools.product(*choices):
                tm = dict(zip(layers, pick))
                stages = [Stage(tuple(sorted(s)), d, t, {v: tm[v] for v in s}) for s, (d, t) in zip(chain, dt)]
                obj, _, _ = evaluate(model, stages)
                if obj is not None and (best is None or obj < best):
                    best = obj
    return best


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), layers=st.integers(1, 4), chain=st.booleans(),
       devices=st.integers(1, 5), microbatches=st.sampled_from([1, 2, 3, 4, 6]),
       memory=st.sampled_from([3e8, 8e8, 1.5e9, 3e9, 1e10]), options=st.sampled_from([1, 2, 3]))
def test_exact_equals_exhaustive(seed, layers, chain, devices, microbatches, memory, options):
    m = random_model(seed, layers=layers, chain=chain, degrees=(1, 2), devices=devices, memory=memory,
                     microbatches=microbatches, options=options)
    want = exhaustive(m)
    r = parallelize(m)
    if want is None:
        assert r.status == "infeasible" and r.objective is None and r.reason
    else:
        assert r.status == "optimal"
        assert math.isclose(r.objective, want, rel_tol=1e-9), (r.objective, want)
        obj, stages, _ = evaluate(m, r.stages)  # the returned plan is valid and has that time
        assert obj == r.objective
        assert r.bound == r.objective and r.gap == 0
        # every baseline and Piper's greedy knapsack are plans of the same model: never better
        for method in ("piper", "pipeline", "data", "equal"):
            b = parallelize(m, method=method)
            if b.objective is not None:
                assert b.objective >= want * (1 - 1e-9)
                assert evaluate(m, b.stages)[0] == pytest.approx(b.objective, rel=1e-12)


def _params_differ(m):
    """``m`` with every layer's later options holding other parameter sizes than its first: the
    planner then solves one knapsack per data-parallel degree instead of one for all."""
    layers = tuple(replace(x, tmpcs={t: tuple(replace(o, parameter_size=o.parameter_size * (1 + 0.7 * i) + 1e7 * i)
                                              for i, o in enumerate(os_)) for t, os_ in x.tmpcs.items()})
                   for x in m.layers)
    return replace(m, layers=layers)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), layers=st.integers(1, 4), chain=st.booleans(),
       devices=st.integers(1, 6), microbatches=st.sampled_from([2, 4, 6]),
       memory=st.sampled_from([3e8, 6e8, 1e9, 2e9]), options=st.sampled_from([2, 3]), shared=st.booleans(),
       dense=st.booleans())
def test_exact_equals_exhaustive_when_memory_is_tight(seed, layers, chain, devices, microbatches, memory, options,
                                                      shared, dense):
    """GNMT-like: memory that forces recomputation, both knapsack paths (parameters shared by a
    layer's options or not) and both ways of keeping an ideal's points (candidates checked as they
    come, solving a knapsack only when it may matter; or all sorted at the end)."""
    m = random_model(seed, layers=layers, chain=chain, degrees=(1, 2), devices=devices, memory=memory,
                     microbatches=microbatches, options=options)
    if not shared:
        m = _params_differ(m)
    want = exhaustive(m)
    with mock.patch.object(planner, "_DENSE_CELLS", planner._DENSE_CELLS if dense else 0):
        r = parallelize(m)
    if want is None:
        assert r.status == "infeasible" and r.objective is None
    else:
        assert r.status == "optimal" and math.isclose(r.objective, want, rel_tol=1e-9), (r.objective, want)
        assert evaluate(m, r.stages)[0] == r.objective


def test_recomputation_chosen_when_memory_is_short():
    m = random_model(5, layers=3, chain=True, degrees=(1,), devices=1, microbatches=1, memory=1e12)
    roomy = parallelize(m)
    assert roomy.stages and not any(s.recomputed for s in roomy.stages)
    need = sum(max(o.memory_a + o.memory_b for o in x.tmpcs[1]) for x in m.layers)
    least = sum(min(o.memory_a + o.memory_b for o in x.tmpcs[1]) for x in m.layers)
    tight = parallelize(m, memory=(need + least) / 2)
    if least < need:
        assert tight.status == "optimal" and any(s.recomputed for s in tight.stages)
        assert tight.objective >= roomy.objective


def test_time_limit_returns_the_incumbent():
    m = random_model(9, layers=18, devices=64, memory=1e10)  # 0.6 s of CPU to plan exactly; the limit leaves 0.01
    r = parallelize(m, time_limit=1e-9)
    assert r.status == "time_limit" and r.reason and 0 < r.bound <= r.objective
    base = min(x.objective for x in (parallelize(m, method="equal"), parallelize(m, method="data"))
               if x.objective is not None)
    assert r.objective == base and evaluate(m, r.stages)[0] == pytest.approx(base, rel=1e-12)


def test_the_package_root_plans_as_the_room_does():
    import devplace_lite as dl

    m = random_model(1, layers=3)
    assert dl.parallelize(m).objective == parallelize(m).objective


def test_infeasible_reason_names_the_layer():
    m = random_model(2, layers=3, memory=1.0)
    r = parallelize(m)
    assert r.status == "infeasible" and r.objective is None and "layer" in r.reason


def test_repeat_layer_grows_the_chain_as_piper_does():
    m = random_model(4, layers=6, chain=True)

    m = replace(m, layers=tuple(replace(x, name="T" if 1 <= x.id <= 4 else x.name) for x in m.layers))
    g = repeat_layer(m, 7, name="T")
    ids = [x.id for x in g.layers]
    assert len(ids) == 9 and sorted(ids) == list(range(9))
    nxt = {u: v for u, v, _ in g.edges}
    # the copies 6, 7, 8 follow layer 3 (the next-to-last T) and precede the last T (4)
    assert [nxt[3], nxt[6], nxt[7], nxt[8]] == [6, 7, 8, 4]
    model_from_dict(model_to_dict(g))  # still a valid model
    with pytest.raises(GraphError):
        repeat_layer(m, 2, name="T")


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d.pop("nodes"), "missing field"),
    (lambda d: d["edges"].append({"sourceId": 1, "destId": 0, "communicationCost": 1.0}), "cycle"),
    (lambda d: d["edges"].append({"sourceId": 0, "destId": 99, "communicationCost": 1.0}), "not in nodes"),
    (lambda d: d["nodes"][0]["TMPCs"]["1"][0].update(timePerSample=-1), "non-negative"),
    (lambda d: d["nodes"][1]["TMPCs"]["1"][0]["syncTimeFw"].clear(), "exactly"),
    (lambda d: d.update(maxDevices=0), "devices"),
    (lambda d: d["nodes"].append(dict(d["nodes"][0])), "twice"),
])
def test_bad_input_refused(mutate, msg):
    d = model_to_dict(random_model(0, layers=3, chain=True))
    mutate(d)
    with pytest.raises(GraphError, match=msg):
        model_from_dict(d)


def test_bad_arguments_refused():
    m = random_model(0, layers=3)
    with pytest.raises(UsageError):
        parallelize(m, method="nope")
    with pytest.raises(GraphError):
        parallelize(m, devices=0)
    with pytest.raises(GraphError):
        parallelize(m, memory=-1.0)
    assert set(PARALLELIZE) >= {"exact", "piper", "pipeline", "data", "equal"}


def _cli(args, capsys):
    from devplace_lite.cli import main

    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_and_overrides(tmp_path, capsys):
    f = tmp_path / "m.json"
    m = random_model(7, layers=4, devices=2)
    f.write_text(json.dumps(model_to_dict(m)))
    code, out, _ = _cli(["parallelize", str(f), "-k", "4", "--memory", "4e9", "--microbatches", "4",
                         "--bandwidth", "1e10", "--json"], capsys)
    assert code == 0
    a = json.loads(out)
    want = parallelize(m, devices=4, memory=4e9, microbatches=4, bandwidth=1e10)
    assert a["status"] == want.status and a["objective"] == pytest.approx(want.objective, rel=1e-12)
    assert sum(s["devices"] for s in a["stages"]) <= 4
    code, out, _ = _cli(["parallelize", str(f), "--method", "equal"], capsys)
    assert code == 0 and "time per sample" in out


@pytest.mark.parametrize("args", [["-k", "0"], ["--memory", "-3"], ["--method", "nope"], ["--microbatches", "0"]])
def test_cli_bad_input_one_line_exit_2(tmp_path, capsys, args):
    f = tmp_path / "m.json"
    f.write_text(json.dumps(model_to_dict(random_model(7, layers=3))))
    try:
        code, out, err = _cli(["parallelize", str(f), *args], capsys)
    except SystemExit as e:  # argparse refuses before the command runs
        code, err = e.code, capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_cli_bad_file_one_line_exit_2(tmp_path, capsys):
    f = tmp_path / "m.json"
    f.write_text('{"nodes": []}')
    code, out, err = _cli(["parallelize", str(f)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and out == ""


def test_a_file_that_is_not_json_reads_as_every_command_reads_it(tmp_path, capsys):
    """One wording for one fault: parallelize said `not JSON (...)` where partition and bound say
    `not valid JSON (... at line L, column C)`."""
    f = tmp_path / "m.json"
    f.write_text("hello, not json\n")
    errs = []
    for args in (["parallelize", str(f)], ["partition", str(f), "--method", "dp", "-k", "2"], ["bound", str(f), "-k", "2"]):
        code, out, err = _cli(args, capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        errs.append(err)
    assert len(set(errs)) == 1 and f"{f}: not valid JSON (Expecting value at line 1, column 1)" in errs[0], errs
