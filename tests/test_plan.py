"""`devplace plan`: capture of models nobody here wrote (torch.export, torch.fx with automatic
leaf modules), the exact split among split-point plans against an exhaustive search, stage
memory under the schedules, clear errors, and real torchrun runs (two loopback nodes) whose
outputs and gradients equal the unsplit model's. No assertion reads a wall clock."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from devplace_lite.cli import main  # noqa: E402
from devplace_lite.cost import evaluate  # noqa: E402
from devplace_lite.errors import GraphError, UsageError  # noqa: E402
from devplace_lite.pipeline.capture import _run_in_order, capture  # noqa: E402
from devplace_lite.pipeline.calibration import _fit, scaled_graph  # noqa: E402
from devplace_lite.pipeline.baseline_splits import even_split  # noqa: E402
from devplace_lite.pipeline.costs import in_flight  # noqa: E402
from devplace_lite.pipeline.measure import _whole, measure_segments  # noqa: E402
from devplace_lite.pipeline.pipeline_plan import stage_assignment  # noqa: E402
from devplace_lite.pipeline.planner import plan, plan_graph  # noqa: E402
from devplace_lite.pipeline.segments import segment_graph  # noqa: E402
from devplace_lite.pipeline.torchrun import launch, torchrun_commands  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import plan_models  # noqa: E402


@pytest.fixture
def on_path(monkeypatch):
    """torchrun's processes import the test models by spec: put this folder on their path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_import_devplace_lite_and_the_plan_command_do_not_import_torch():
    code = ("import sys, devplace_lite, devplace_lite.commands.plan; "
            "assert callable(devplace_lite.plan); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- capture ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unequal_capture():
    model, x = plan_models.unequal(batch=32)
    return model, x, capture(model, x)


def test_export_capture_keeps_split_points_and_finds_a_weight_used_outside_its_module(unequal_capture):
    model, x, cap = unequal_capture
    assert cap.how == "torch.export" and not cap.notes
    assert cap.names == ["embed"] + [f"layers.{i}" for i in range(6)]
    assert cap.tied == {"embed.weight": [0, 6]}  # read by the embedding and by the output projection
    times = measure_segments(cap, training=True, repeats=2, warmup=1)
    assert all(t > 0 for t in times.forward_ms) and all(t > 0 for t in times.backward_ms)
    # the wide layers (8x the arithmetic) cost more than the narrow ones: asserted on the roofline,
    # which load cannot flip (measured CPU times flipped it in loaded runs)
    roof = measure_segments(cap, training=True, spec="A100")
    assert min(roof.forward_ms[3:5]) > max(roof.forward_ms[1:3])
    assert min(roof.backward_ms[3:5]) > max(roof.backward_ms[1:3])
    g = segment_graph(cap, times)
    assert g.is_training and g.n == 1 + 2 * 7 and g.meta["segments"]["names"] == cap.names


def test_segment_times_sum_to_the_model_timed_whole_and_never_scale_up(unequal_capture):
    model, x, cap = unequal_capture
    whole = _whole(cap)  # the program without segment boundaries: the model itself
    with torch.no_grad():
        (_, m, args, _), = list(_run_in_order(whole, x))
        assert torch.allclose(m(*args), model(*x), atol=1e-6)
    t = measure_segments(cap, training=True, repeats=3, warmup=1)
    assert set(t.boundary_scale) == {"F", "B"} and all(0 < v <= 1 for v in t.boundary_scale.values())
    for kind, times in (("F", t.forward_ms), ("B", t.backward_ms)):
        if t.boundary_scale[kind] < 1:  # scaled: the segments sum to the whole model's time
            assert sum(times) == pytest.approx(t.whole_ms[kind], rel=1e-9)
        else:  # the whole model measured no faster: the segments' own times, unscaled
            assert sum(times) <= t.whole_ms[kind] + 1e-9
    assert all(i >= 0 and w > 0 for i, w in zip(t.backward_input_ms, t.backward_weight_ms))
    assert measure_segments(cap, training=True, spec="A100").boundary_scale is None  # a roofline prices kernels


def test_the_fx_route_is_timed_whole_as_traced():
    model, x = plan_models.branchy(batch=2)
    cap = capture(model, x)
    (_, m, args, _), = list(_run_in_order(_whole(cap), x))
    with torch.no_grad():
        assert torch.allclose(m(*args), model(*x))
    assert 0 < measure_segments(cap, training=True, repeats=1, warmup=0).boundary_scale["F"] <= 1


def test_fx_fallback_names_the_module_the_line_and_the_way_taken():
    model, x = plan_models.branchy(batch=2)
    cap = capture(model, x)
    assert cap.how == "torch.fx" and cap.leaf_modules == ["blocks.1"]
    export_note, fx_note = cap.notes
    assert export_note.startswith("torch.export fails at plan_models.py:") and "if x.abs().sum() >= 0:" in export_note
    assert export_note.endswith("fallback: torch.fx")
    assert "inside module blocks.1 at plan_models.py:" in fx_note and "kept blocks.1 whole" in fx_note
    assert cap.names == ["blocks", "blocks.1", "blocks.2", "blocks.3"]
    with torch.no_grad():  # the segments, run in order, are the model
        out = x
        for m in cap.modules:
            res = m(*out)
            out = res if isinstance(res, tuple) else (res,)
        assert torch.allclose(out[0], model(*x))


def test_a_model_that_fails_on_its_inputs_is_one_line():
    model, _ = plan_models.branchy(batch=2)
    with pytest.raises(GraphError) as err:
        capture(model, (torch.randn(2, 5),))
    assert "\n" not in str(err.value) and "fails on its example inputs" in str(err.value)


# -- planning -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unequal_graph(unequal_capture):
    return plan_models.unequal_profile(unequal_capture[2])


@pytest.mark.parametrize("k", [2, 3])
def test_plan_is_the_best_split_point_plan_and_the_bound_is_below_it(unequal_graph, k):
    p = plan_graph(unequal_graph, k=k, microbatches=4)
    assert p.result.status == "optimal" and p.bound <= p.result.objective * (1 + 1e-9)
    assert 0.0 <= p.gap <= 1.0
    n = len(p.names)
    best = min(evaluate(p.chain, p.cluster, stage_assignment(p, [sum(i >= c for c in cuts) for i in range(n)])).max_load
               for j in range(1, k + 1) for cuts in itertools.combinations(range(1, n), j - 1))
    assert p.result.objective == pytest.approx(best, rel=1e-9)  # exhaustive over every choice of split points
    assert p.split_points == [p.names[segs[0]] for segs in p.stage_segments[1:]]
    assert sorted(itertools.chain(*p.stage_segments)) == list(range(n))  # stages are program-order intervals


def test_stage_memory_follows_the_schedule(unequal_graph):
    seg = unequal_graph.meta["segments"]
    p1 = plan_graph(unequal_graph, k=3, microbatches=8, schedule="1f1b", optimizer="adam")
    pg = plan_graph(unequal_graph, k=3, microbatches=8, schedule="gpipe", optimizer="adam")
    for p in (p1, pg):
        for s, (segs, mem) in enumerate(zip(p.stage_segments, p.stage_memory())):
            # a value several of the stage's segments save is one tensor there
            again = sum(b * (len(set(saves) & set(segs)) - 1) for b, saves in seg["shared_saves"]
                        if len(set(saves) & set(segs)) > 1)
            acts = sum(seg["activation_bytes"][i] for i in segs) - again
            grads = sum(seg["grad_bytes"][i] for i in segs)
            n = in_flight(p.schedule, 8, p.num_stages, s, True)
            assert mem["peak"] == pytest.approx(sum(seg["param_bytes"][i] for i in segs) + 3 * grads + n * acts)
    assert [in_flight("1f1b", 8, 3, s, True) for s in range(3)] == [3, 2, 1]
    assert in_flight("gpipe", 8, 3, 0, True) == 8 and in_flight("gpipe", 8, 3, 0, False) == 1
    # a tied weight held by two stages is counted on both
    assert p1.tied[0]["parameter"] == "embed.weight" and len(p1.tied[0]["stages"]) == 2


def test_a_plan_over_the_memory_cap_is_refused_in_one_line(unequal_graph):
    with pytest.raises(GraphError) as err:
        plan_graph(unequal_graph, k=2, microbatches=4, memory=1000.0)
    msg = str(err.value)
    assert "\n" not in msg and "way out" in msg and "1000 bytes" in msg


def test_calibration_fits_each_kind_by_least_squares(unequal_graph):
    assert _fit([1.0, 2.0], [2.0, 4.0]) == pytest.approx(2.0)
    assert _fit([0.0], [3.0]) == 1.0
    g = scaled_graph(unequal_graph, 0.5, 2.0)
    f, b = ~unequal_graph.backward, unequal_graph.backward
    assert np.allclose(g.p_acc[f], 0.5 * unequal_graph.p_acc[f]) and np.allclose(g.p_acc[b], 2 * unequal_graph.p_acc[b])
    assert even_split(unequal_graph, 3) == [0, 0, 0, 1, 1, 2, 2]


def test_bad_numbers_are_usage_errors():
    model, x = plan_models.unequal(batch=4)
    for kwargs in (dict(k=0), dict(k=2, microbatches=3), dict(k=2, repeats=0), dict(k=2, time_limit=float("nan"))):
        with pytest.raises(UsageError):
            plan(model, x, **kwargs)


# -- torchrun -----------------------------------------------------------------------------------
def test_torchrun_commands_for_two_loopback_nodes():
    cmds = torchrun_commands("run.py", 4, nodes=2, port=29999)
    assert [c[c.index("--node-rank") + 1] for c in cmds] == ["0", "1"]
    for c in cmds:
        assert c[c.index("--nnodes") + 1] == "2" and c[c.index("--nproc-per-node") + 1] == "2"
        assert c[c.index("--rdzv-endpoint") + 1] == "127.0.0.1:29999"
    with pytest.raises(UsageError, match="evenly"):
        torchrun_commands("run.py", 3, nodes=2)


@pytest.mark.slow
def test_two_torchrun_nodes_on_loopback_equal_the_unsplit_model(tmp_path, on_path):
    """k = 4 stages as two torchrun nodes of two processes: a skip connection across stages
    and a weight tied between the first and last stage (its gradients summed)."""
    model, x = plan_models.unequal(batch=8)
    p = plan(model, x, k=4, microbatches=4, model_spec="plan_models:unequal", repeats=2)
    assert p.num_stages == 4 and len(p.tied[0]["stages"]) == 2
    paths = p.write(tmp_path)
    assert "SplitPoint.BEGINNING" in paths["script"].read_text()
    run = launch(paths["plan"], nodes=2, steps=1, warmup=0, check=True, timeout=400)
    assert run["nodes"] == 2 and run["stages"] == 4 and run["backend"] == "gloo"
    assert run["check"]["outputs_allclose"] and run["check"]["grads_allclose"], run["check"]
    assert run["check"]["parameters_checked"] >= 7
    assert all(t > 0 for t in run["stage_forward_cpu_ms"]) and all(t > 0 for t in run["stage_backward_cpu_ms"])
    assert all(m > 0 for m in run["peak_memory"])


@pytest.mark.slow
def test_cli_plans_and_runs_a_model_export_cannot_capture(tmp_path, capsys, on_path):
    code, out, err = _cli(capsys, "plan", "plan_models:branchy_wide", "-k", 2, "--batch", 8, "--repeats", 2,
                          "--out", tmp_path, "--run", "--check", "--steps", 1, "--json")
    assert code == 0, err
    ans = json.loads(out)
    assert ans["capture"] == "torch.fx" and any("blocks.1" in n for n in ans["notes"])
    assert ans["run"]["check"]["outputs_allclose"] and ans["run"]["check"]["grads_allclose"]
    # one stage or two: the price of a message, measured here under this machine's load, decides
    assert ans["stages"] in (1, 2) and ans["torchrun"].startswith(f"torchrun --nproc-per-node {ans['stages']}")
    assert json.loads((tmp_path / "plan.json").read_text())["split_spec"] == ans["split_spec"]
    # the price of a message, measured before planning, is in the forecast, and a run over two
    # ranks measures its own (its runtime's CPU time and its wall-clock price); one rank sends none
    priced = [n for n in ans["notes"] if n.startswith("a message priced at ")]
    assert len(priced) == 1
    run = ans["run"]
    assert (run["action_overhead_ms"], run["action_wall_ms"]) == (None, None) if ans["stages"] == 1 else \
        run["action_overhead_ms"] > 0 and run["action_wall_ms"] >= 0


# -- the command line ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["platform:system", "-k", "2"], "platform.system() returned str, not (model, example inputs)"),
    # builtins are refused before they run: os.fork forked, os.abort dumped core, input waited on stdin
    (["os:getcwd", "-k", "2"], "os.getcwd is a builtin_function_or_method, not a Python function"),
    (["builtins:input", "-k", "2"], "builtins.input is a builtin_function_or_method, not a Python function"),
    (["builtins:exit", "-k", "2"], "builtins.exit is a Quitter, not a Python function"),
    # a Python function that exits: SystemExit ended devplace with status 0 and no answer
    (["plan_models:exits", "-k", "2"], "plan_models.exits() failed (SystemExit: 0)"),
    (["nosuchmodule:f", "-k", "2"], "cannot import nosuchmodule"),
    (["gpt", "-k", "0"], "-k/--accelerators: expected an integer in [1, 1024]"),
    (["gpt", "-k", "2", "--memory", "nan"], "--memory: expected a finite number > 0"),
    (["gpt", "-k", "2", "--batch", "6", "--microbatches", "4"],
     "a batch of 6 does not split into 4 equal micro-batches: give --microbatches a divisor of 6, or --batch a "
     "multiple of 4"),
    (["gpt", "-k", "2", "--check"], "--check needs --run"),
])
def test_cli_bad_input_is_one_line_and_status_2(capsys, tmp_path, argv, words):
    code, out, err = _cli(capsys, "plan", *argv, "--out", tmp_path / "p")
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "p").exists()


def test_out_names_a_folder_and_a_file_there_is_refused_untouched(capsys, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    code, out, err = _cli(capsys, "plan", "gpt", "-k", "2", "--out", target)
    assert code == 2 and err.count("\n") == 1 and "is not a folder" in err, err
    assert target.read_text() == "mine"


def test_out_that_is_empty_or_holds_a_fifo_is_refused_before_profiling(capsys, tmp_path, monkeypatch):
    """``--out ''`` wrote the plan into the current folder; a FIFO named run_pipeline.py in the
    folder was replaced by the script after the whole profiling and planning."""
    import devplace_lite.zoo as zoo

    monkeypatch.setattr(zoo, "load", lambda *a, **k: pytest.fail("profiled before refusing the output"))
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "plan", "gpt", "-k", "2", "--out", "")
    assert code == 2 and err.count("\n") == 1 and "--out: an empty name" in err, err
    os.mkfifo(tmp_path / "run_pipeline.py")
    code, out, err = _cli(capsys, "plan", "gpt", "-k", "2", "--out", tmp_path)
    assert code == 2 and err.count("\n") == 1 and "run_pipeline.py: not a regular file (a FIFO)" in err, err
    assert os.listdir(tmp_path) == ["run_pipeline.py"]


def test_plan_command_refuses_a_spec_that_gives_no_model(capsys, tmp_path):
    code, out, err = _cli(capsys, "plan", "platform:system", "-k", "1", "--out", tmp_path)
    assert code == 2 and err.count("\n") == 1 and "platform.system() returned str" in err


def test_what_a_model_function_prints_stays_off_stdout(capsys, tmp_path):
    """stdout carries --json: a builder's own print went there before the answer or the error."""
    code, out, err = _cli(capsys, "plan", "plan_models:chatty", "-k", "1", "--out", tmp_path, "--json")
    assert code == 2 and out == "" and err == ("building\ndevplace: error: model spec plan_models:chatty: "
                                               "plan_models.chatty() returned str, not (model, example inputs): the "
                                               "function must return an nn.Module and a tensor or a tuple of tensors\n")


def test_cli_plan_of_a_zoo_model_writes_plan_graph_and_script(tmp_path, capsys):
    code, out, err = _cli(capsys, "plan", "gpt", "-k", 2, "--repeats", 2, "--out", tmp_path, "--schedule", "gpipe",
                          "--optimizer", "adam")
    assert code == 0, err
    assert {p.name for p in tmp_path.iterdir()} == {"plan.json", "graph.json", "run_pipeline.py"}
    plan_json = json.loads((tmp_path / "plan.json").read_text())
    assert plan_json["schedule"] == "gpipe" and plan_json["stage_memory"][0]["microbatches_in_flight"] == 4
    assert plan_json["gap"] is not None and plan_json["bound_ms"] <= plan_json["objective_ms"] * (1 + 1e-9)
    assert "proven bound" in out and "split points" in out
    from devplace_lite.io import load_graph

    g = load_graph(tmp_path / "graph.json")  # the written graph is a valid graph file
    assert g.meta["segments"]["names"] == plan_json["segment_names"]


def test_the_models_inputs_get_no_gradient_in_the_profile():
    """A pipeline's first stage gets data: an image's gradient through the first layer is
    computed by nobody, so the profile neither times it nor counts an inputs-only pass."""
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = (torch.randn(4, 16),)
    cap = capture(net, x)
    t = measure_segments(cap, training=True, repeats=1, warmup=0)
    assert t.backward_input_ms[0] == 0.0 and t.backward_ms[0] > 0  # the weights' gradients, nothing else
    assert t.backward_weight_ms[0] == t.backward_ms[0]  # as torch's first stage: its W is the whole backward
    assert t.backward_input_ms[2] > 0 and t.backward_weight_ms[2] > 0  # a later segment's input does get its gradient
    assert not x[0].requires_grad  # the example is left as given


def test_the_split_backward_is_timed_with_torchs_own_passes(monkeypatch):
    """I and W are what torch's zero-bubble schedules call (`stage_backward_input`, then
    `stage_backward_weight` on what it kept), once per segment whose input takes a gradient
    and per timed round: their sum is not the full backward's time in torch."""
    import torch.distributed.pipelining._backward as tb

    calls = {"input": 0, "weight": 0}
    for kind in calls:
        real = getattr(tb, f"stage_backward_{kind}")

        def counted(*a, _real=real, _kind=kind, **kw):
            calls[_kind] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(tb, f"stage_backward_{kind}", counted)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cap = capture(net, (torch.randn(4, 16),))
    measure_segments(cap, training=True, repeats=2, warmup=0)
    assert calls == {"input": 2 * 2, "weight": 2 * 2}  # segments 1 and 2, two rounds (the whole model: none)


class _ChannelsLast(torch.nn.Module):
    def forward(self, x):
        return x.permute(0, 2, 1) * 2  # a view with the last two dimensions swapped


def test_a_value_made_contiguous_for_a_boundary_is_profiled_with_the_models_strides():
    """Inside a stage the next operator reads a value as the model made it (ConvNeXt's
    channels-last blocks: its depthwise convolutions' backward runs at half the speed on
    that layout), so the profile feeds a segment its inputs with those strides."""
    from devplace_lite.pipeline.measure import _model_layout

    net = torch.nn.Sequential(torch.nn.Linear(8, 8), _ChannelsLast(), torch.nn.Linear(4, 4))
    x = (torch.randn(2, 4, 8),)
    cap = capture(net, x)
    assert cap.layouts and all(st == (32, 1, 8) for st in cap.layouts.values())
    (i, m, args, _), = [c for c in _run_in_order(cap, x) if c[0] == 2]
    assert args[0].is_contiguous()  # what the boundary sends
    fed = _model_layout(m, args, cap.layouts)
    assert fed[0].stride() == (32, 1, 8) and torch.equal(fed[0], args[0])
    with torch.no_grad():
        assert torch.allclose(m(*fed), net(*x))


class _Broadcast(torch.nn.Module):
    def forward(self, x):
        return x[:, :1].expand(-1, 4)  # stride 0: four elements, one memory location


def test_a_broadcast_value_at_a_boundary_is_profiled_as_the_copy_it_is_sent_as():
    """A broadcast view has no dense layout to restore (writing into it fails), so the next
    segment is timed on the contiguous copy, as a stage receives it."""
    from devplace_lite.pipeline.measure import _model_layout

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), _Broadcast(), torch.nn.Linear(4, 2))
    x = (torch.randn(3, 4),)
    cap = capture(net, x)
    assert any(0 in st for st in cap.layouts.values())
    (_, m, args, _), = [c for c in _run_in_order(cap, x) if c[0] == 2]
    assert _model_layout(m, args, cap.layouts)[0].is_contiguous()
    assert measure_segments(cap, training=True, repeats=1, warmup=0).backward_weight_ms[2] > 0


def test_the_runtime_s_cpu_time_is_counted_outside_the_passes_and_the_message_price_is_cpu_only():
    from devplace_lite.pipeline.calibration import message_price
    from devplace_lite.pipeline.run_figures import _overhead

    record = [("F", 0.1, 0.2, 10.0, 0, 0), ("B", 0.3, 0.4, 20.0, 0, 0), ("W", 0.5, 0.6, 5.0, 0, 0),
              ("F", 1.1, 1.2, 10.0, 0, 0), ("B", 1.3, 1.4, 20.0, 0, 0)]
    # step 1: 37 ms of thread time, 35 in passes, over 2 passes that message (W does not); step 2: 4 over 2
    assert _overhead([(0.0, 1.0), (1.0, 2.0)], [37.0, 34.0], record, [1]) == pytest.approx(1.5)
    # a middle stage's passes send and receive: 4 messages in each step
    assert _overhead([(0.0, 1.0), (1.0, 2.0)], [37.0, 34.0], record, [2]) == pytest.approx(0.75)
    assert _overhead([(5.0, 6.0)], [3.0], record, [1]) is None  # no pass in the step
    with pytest.raises(UsageError, match="measured on CPU"):
        message_price("cuda")


def test_a_value_two_segments_of_a_stage_save_is_counted_once():
    """A tanh saves its output and the next segment's linear layer saves the same tensor as
    its input: one tensor inside a stage, a copy per segment in the profile. The plan's saved
    activations per stage equal what the run's own stage modules save."""
    import copy

    from torch.distributed.pipelining import pipeline

    from devplace_lite.pipeline.activations import ActivationMeter
    from devplace_lite.pipeline.torch_split import known_warnings_filtered, split_policy

    model, x = plan_models.unequal(batch=8)
    p = plan(model.train(), x, k=2, microbatches=4, repeats=1)
    seg = p.graph.meta["segments"]
    assert seg["shared_saves"] and all(len(segs) > 1 for _, segs in seg["shared_saves"])
    micro = tuple(t[:2] for t in x)
    with known_warnings_filtered():  # torch's own deprecation inside pipeline(), as the run filters it
        pipe = pipeline(copy.deepcopy(model), micro, split_policy=split_policy(p.split_points))
    saved, ins = [], micro
    for s in range(pipe.num_stages):
        m = pipe.get_stage_module(s)
        meter = ActivationMeter({id(w) for w in m.parameters()})
        with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
            out = m(*(t.detach().requires_grad_(bool(s)) for t in ins))
        saved.append(meter.peak)
        ins = out if isinstance(out, tuple) else (out,)
    assert [st["activations_per_microbatch"] for st in p.stage_memory()] == saved
    assert sum(p._sum(seg["activation_bytes"])) > sum(saved)  # summing the segments counted them twice


def test_a_plan_on_fewer_ranks_says_why_and_all_ranks_uses_every_one(capsys, tmp_path):
    """With a message priced high (as `--run` measures it on a busy machine) one stage forecasts
    the shortest step: the plan says it uses 1 of the 2 ranks and why, in one note; asked for all
    ranks (`least_ranks`, the CLI's --all-ranks) it splits over both."""
    model, x = plan_models.unequal(batch=8)
    one = plan(model.train(), x, k=2, microbatches=4, repeats=1, action_ms=1000.0)
    assert one.ranks == 1
    (why,) = [n for n in one.notes if "of the 2 ranks" in n]
    assert why.startswith("1 of the 2 ranks: the least forecast step found is on 1 stage(s)") and "1000.000 ms" in why
    assert "--all-ranks" in why
    both = plan(model.train(), x, k=2, microbatches=4, repeats=1, action_ms=1000.0, least_ranks=2)
    assert both.ranks == 2 and not [n for n in both.notes if "of the 2 ranks" in n]
    assert both.step_ms() >= one.step_ms()  # the forecast that made the planner keep one rank
    code, out, err = _cli(capsys, "plan", "gpt", "-k", 2, "--all-ranks", "--repeats", 1, "--json", "--out", tmp_path)
    ans = json.loads(out)
    assert code == 0 and ans["ranks"] == 2 and "--all-ranks" in ans["command"], err


def test_an_inference_plan_says_forwards_only_and_no_gradient(capsys, tmp_path):
    """An inference plan printed `1f1b` and that the tied embedding's gradients are all-reduced:
    it runs forwards only and has no gradient."""
    code, out, err = _cli(capsys, "plan", "gpt", "-k", 2, "--inference", "--repeats", 1, "--out", tmp_path)
    assert code == 0, err
    first = out.splitlines()[0]
    assert "inference (forwards only, in 1f1b's order)" in first and ", 1f1b with" not in first
    assert "tied tokens.weight: replicated on stages [0, 1]" in out
    assert "gradient" not in out.replace("no gradient", "") and "all-reduce" not in out, out
