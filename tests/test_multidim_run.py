"""A Piper plan run with torch's own engines (issue 28, item 6): DeviceMesh dp x pp x tp,
torch.distributed.pipelining, DDP and Megatron-style tensor parallelism, gloo on loopback,
checked against the unsplit model (float64: outputs and gradients within rtol 1e-9, atol 1e-11)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with the gloo backend is not available in this torch build",
                allow_module_level=True)

from devplace_lite.errors import UsageError  # noqa: E402
from devplace_lite.multidim import Stage, evaluate, parallelize  # noqa: E402
from devplace_lite.multidim.run import _gather, chain_model, encoder_stack, mesh_of, run_plan  # noqa: E402

SPEC = dict(layers=2, width=32, heads=4, ffn=64, features=16)


def _batch(n: int = 16, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, 16, generator=g), torch.randn(n, 8, 16, generator=g)


def _plan(d: int, t: int) -> list[Stage]:
    return [Stage(ids, d, t, {i: "vanilla" for i in ids}) for ids in ((0, 1), (2, 3))]


@pytest.mark.slow
def test_dp2_pp2_tp2_equals_the_unsplit_model_beside_the_forecast():
    """Eight gloo processes: two replicas of a two-stage pipeline whose transformer blocks are
    split over two devices; the forecast comes from the model calibrated here."""
    x, y = _batch()
    model = chain_model(encoder_stack, SPEC, x[:4], devices=8, microbatches=4, repeats=2)
    forecast, stages, reason = evaluate(model, _plan(2, 2))
    assert reason is None and forecast > 0
    run = run_plan(stages, encoder_stack, SPEC, x, y, microbatches=4, forecast=forecast, steps=1, warmup=1,
                   timeout=400)
    assert run["mesh"] == {"dp": 2, "pp": 2, "tp": 2} and run["processes"] == 8 and run["backend"] == "gloo"
    c = run["check"]
    assert c["ok"], c
    assert c["outputs_max_abs"] <= 1e-11 and c["grads_max_abs"] <= 1e-11
    assert c["parameters_checked"] == len(list(encoder_stack(**SPEC).parameters()))
    assert run["forecast_per_sample"] == forecast
    assert run["measured_cpu_per_sample"] > 0 and run["measured_wall_per_sample"] > 0
    assert sorted((r["dp"], r["pp"], r["tp"]) for r in run["ranks"]) == [
        (a, b, c_) for a in range(2) for b in range(2) for c_ in range(2)]


@pytest.mark.slow
def test_two_torchrun_nodes_run_a_two_stage_pipeline_with_1f1b():
    """The multi-machine path on one machine: one torchrun per node, a stage per node (two
    ranks: the eight-rank mesh above runs the same rank code)."""
    x, y = _batch(8, seed=2)
    run = run_plan(_plan(1, 1), encoder_stack, SPEC, x, y, microbatches=4, schedule="1f1b", nodes=2,
                   steps=1, warmup=0, timeout=400)
    assert run["nodes"] == 2 and run["processes"] == 2 and run["check"]["ok"], run["check"]
    assert all("torch.distributed.run" in c and "--nnodes 2" in c for c in run["commands"])


def test_the_check_sees_a_wrong_gradient_and_a_wrong_output():
    """The comparison itself (no processes): one rank holding the whole model, then the same
    rank with one gradient entry or one output entry off by 1e-6."""
    x, y = _batch(4)
    torch.manual_seed(0)
    ref = encoder_stack(**SPEC).double()
    out = ref(x.double())
    torch.nn.functional.mse_loss(out, y.double()).backward()
    grads = {k: v.grad.clone() for k, v in ref.named_parameters()}
    spec = {"mesh": [1, 1, 1], "backend": "gloo", "schedule": "gpipe", "microbatches": 2, "dtype": "float64"}

    def gather(o, g):
        torch.manual_seed(0)
        rank = {"rank": 0, "coords": [0, 0, 0], "out": o, "grads": g, "cpu": [1.0], "wall": [1.0],
                "main_thread": [1.0], "actions": [1.0]}
        return _gather(spec, [rank], encoder_stack(**SPEC).double(), x.double(), y.double(), None, 1e-9, 1e-11)

    assert gather(out.detach(), grads)["check"]["ok"]
    bad = dict(grads)
    bad["1.linear2.weight"] = bad["1.linear2.weight"].clone()
    bad["1.linear2.weight"][0, 0] += 1e-6
    c = gather(out.detach(), bad)["check"]
    assert not c["ok"] and c["grads_max_abs"] == pytest.approx(1e-6, rel=1e-3)
    off = out.detach().clone()
    off[0, 0, 0] += 1e-6
    assert not gather(off, grads)["check"]["ok"]


def test_mesh_of_takes_one_mesh_of_contiguous_stages():
    assert mesh_of(_plan(2, 2), 4) == (2, 2, 2, [(0, 2), (2, 4)])
    mixed = [Stage((0, 1), 2, 1, {}), Stage((2, 3), 1, 1, {})]
    for bad, children, match in ((mixed, 4, "mix"), (_plan(1, 1), 5, "covers 4"), ([], 4, "no stage"),
                                 ([Stage((0, 2), 1, 1, {}), Stage((1, 3), 1, 1, {})], 4, "contiguous")):
        with pytest.raises(UsageError, match=match):
            mesh_of(bad, children)


def test_run_plan_refuses_bad_sizes_before_starting_anything():
    x, y = _batch(6)
    with pytest.raises(UsageError, match="micro-batches"):
        run_plan(_plan(2, 1), encoder_stack, SPEC, x, y, microbatches=4)
    with pytest.raises(UsageError, match="schedule"):
        run_plan(_plan(1, 1), encoder_stack, SPEC, x, y, microbatches=2, schedule="zb")
    if torch.cuda.device_count() < 2:
        with pytest.raises(UsageError, match="one GPU per rank"):
            run_plan(_plan(1, 1), encoder_stack, SPEC, x, y, microbatches=2, device="cuda")
    with pytest.raises(UsageError, match="module-level"):
        run_plan(_plan(1, 1), lambda: encoder_stack(**SPEC), None, x, y, microbatches=2)


def test_the_calibrated_chain_is_a_model_the_planner_plans():
    """Every child has a t = 2 variant; only the transformer blocks' is cheaper (their
    feed-forward block is split) and lighter in parameters."""
    x, _ = _batch(4)
    m = chain_model(encoder_stack, SPEC, x, devices=8, microbatches=4, repeats=1)
    assert [x_.name for x_ in m.layers] == ["Linear", "TransformerEncoderLayer", "TransformerEncoderLayer", "Linear"]
    assert [e[:2] for e in m.edges] == [(0, 1), (1, 2), (2, 3)]
    assert all(e[2] == 8 * 32 * 8 for e in m.edges)  # one sample's 8 x 32 float64 activations
    for layer in m.layers:
        one, two = layer.tmpcs[1][0], layer.tmpcs[2][0]
        if layer.name == "Linear":
            assert two == one
        else:
            assert two.parameter_size < one.parameter_size
    r = parallelize(m)
    assert r.status == "optimal" and r.objective > 0
