"""``devplace plan MODEL -k K``: from a PyTorch model to a certified pipeline plan and a torchrun script.

::

    devplace plan MODEL -k K [--schedule S] [--stages-per-rank V] [--microbatches M] [--batch B] [--memory BYTES]
                  [--recompute auto|never] [--optimizer none|sgd|adam|mixed-adam] [--inference] [--granularity block|layer]
                  [--method auto|M] [--time-limit S] [--out DIR] [--all-ranks] [--run [--nodes N] [--check]]
                  [--calibrate] [--emit torchtitan FILE] [--json]

MODEL is a zoo name or ``module:function`` returning ``(model, example inputs of the whole
batch)`` (called with ``batch=`` and ``seed=`` when it takes them), e.g.
``devplace_lite.zoo.external:gpt2`` or ``mynet:build`` for ``./mynet.py`` (the current folder is
importable, as with ``python -m``). Without ``--microbatches`` a step has `MICROBATCHES`
micro-batches, or the most below that divide the batch. The command captures the model (torch.export; the
exported graph cut by devplace's splitter where torch's stages fail to run; else torch.fx), measures its segments on one micro-batch (thread CPU time, one thread), splits them
with the exact DP (or a heuristic past its size), proves a lower bound and states the gap,
computes every stage's peak memory under the schedule (refusing a plan over ``--memory``), and
writes ``DIR/plan.json``, ``DIR/graph.json`` and ``DIR/run_pipeline.py`` (split points as
``SplitPoint.BEGINNING``; run it with ``torchrun --nproc-per-node P DIR/run_pipeline.py``).

``--schedule`` names one of torch 2.13's schedules (``gpipe``, ``1f1b``, ``interleaved-1f1b``,
``looped-bfs``, ``interleaved-zb``, ``zbv``, ``dualpipev``; ``--stages-per-rank`` for those that
take several) or ``auto``. The forecast replays the schedule's own action order
(`devplace_lite.schedules.simulate`) and the split is the one whose replayed step is least
(`devplace_lite.schedules.search`, proven where the splits can be enumerated, else its gap);
``--spec A100`` (or A100-80GB, V100, H100, H200) times the segments by that GPU's roofline instead of measuring
them here, which plans a GPU pipeline on a laptop; ``auto`` tries every schedule (and, with
``--microbatches auto``, every micro-batch count that divides the batch) and keeps the least
forecast step within ``--memory``.

Under ``--memory``, ``--recompute auto`` (the default) lets a stage recompute its activations in
its backward (torch.utils.checkpoint around each of its segments in the run: it keeps only
their inputs per micro-batch and pays one more forward per backward) where that is what makes its rank fit: the flags are
chosen with the split, exactly (the least forecast step over splits and flags that fit; with
``--schedule auto`` also over schedules and micro-batch counts). The plan says which stages
recompute (``recompute`` and ``stage_memory[s].recompute`` in plan.json, and a note);
``--recompute never`` keeps every activation.

``--time-limit S`` is the whole command's wall time from its start (loading and capturing the
model included): the measurement's repeats stop early when the limit needs it (each segment is
timed once at least; the notes say so), the split, the schedule search and the bound share what
is left, and with ``--schedule auto`` the choices share it, the plain command's (1F1B) first.
A step cut short keeps its incumbent and bound: the answer's ``status`` is then ``time_limit``,
``stopped`` names those steps and ``auto_choice`` says which choices were not tried (the choice
is then not proven). A capture cannot be cut: a limit shorter than it ends right after it, with
the first choice planned. ``--run`` and ``--calibrate`` runs come after the limit, each within
``--timeout``.

``--run`` runs the script under torchrun here after planning (``--nodes 2``: two torchrun nodes
on loopback) and reports the measured stage CPU times next to the forecast. Before planning, a
CPU run (``-k`` above 1) first measures what a message costs its pass on this machine's wall
clock beyond the pass's CPU time (`devplace_lite.pipeline.calibration.message_price`, about 20 s:
three short runs of a small zoo model) and the forecast prices it on every forward and
backward, once per message the pass exchanges with another rank. Where that price makes fewer
stages forecast a shorter step (on a busy laptop, often one stage), the plan uses fewer ranks
than ``-k`` and a note says so; ``--all-ranks`` asks for all ``-k`` ranks, one stage each (the
split is then the best over exactly that many). ``--check`` compares outputs and gradients with
the unsplit model. ``--calibrate`` runs the plan, scales
each stage's forward, backward, input- and weight-gradient times by measured / forecast, re-plans
with them, runs again, reports the per-stage forecast error before and after, and keeps the
plan whose forecast was nearer its run (it says which).

``--emit torchtitan FILE`` also writes the plan as torchtitan's job config (TOML, read by its
``ConfigManager`` with ``--job.config_file FILE``; `devplace_lite.pipeline.titan`): the
pipeline degree, the schedule, the micro-batch size and the module names of each stage
(``module_fqns_per_model_part``), from which torchtitan's own split function builds the plan's
stages. Its names are torchtitan's: a torchtitan model's own, or a Hugging Face causal LM's as
torchtitan's Hugging Face backend names them.

Errors (one line, exit status 2): a spec that gives no model and example inputs, numbers out
of range, a model neither torch.export nor torch.fx captures (naming module and line), no plan
within the memory. torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from typing import Any

from .. import options
from ..devices import SPECS
from ..errors import UsageError
from ..pipeline.planner import MICROBATCHES  # the library's default (torch-free to import)
from . import print_json

HELP = "plan a model's pipeline (capture, exact split, bound, memory), write a torchrun script, run it"
EPILOG = """\
MODEL is a zoo name (gpt, bert, resnet50, inception, gnmt) or module:function, a Python
function returning (model, example inputs of the whole batch); the current folder is
importable, as with python -m. Examples:

  devplace plan gpt -k 2 --out build/plan
  devplace plan mynet:build -k 2 --out build/plan   # def build(batch=8, seed=0) in ./mynet.py
  devplace plan devplace_lite.zoo.external:gpt2 -k 2 --inference --out build/gpt2-plan
  devplace plan devplace_lite.zoo.external:llama -k 2 --emit torchtitan build/llama.toml

"""


#: torch 2.13's schedules (`devplace_lite.schedules.simulate.SCHEDULES`; listed here so --help needs no import).
SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev")


def _per_rank(text: str) -> int:
    from ..schedules.simulate import MAX_PER_RANK

    try:
        v = int(text)
    except ValueError:
        v = 0
    if not 1 <= v <= MAX_PER_RANK:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, {MAX_PER_RANK}], got {text!r}")
    return v


def _microbatches(text: str) -> int | str:
    return "auto" if text == "auto" else options.SIZE(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog, parser.formatter_class = EPILOG + options.NAMES_RULE, argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", help="zoo name or module:function returning (model, example inputs of the batch); "
                                      "the current folder is importable (examples below)")
    parser.add_argument("-k", "--accelerators", type=options.WORKERS,
                        help="accelerators, as everywhere in devplace: one pipeline rank (a torchrun process) each, "
                             "1..1024; a rank holds --stages-per-rank stages (or give --devices)")
    parser.add_argument("--devices", type=options.WORKERS,
                        help="devices to plan data, tensor and pipeline parallelism over together instead of -k: the "
                             "dp x pp x tp mesh, split, schedule and recomputation with the least forecast step "
                             "(--microbatches then counts the whole step's, shared by the data-parallel replicas; "
                             "default one sample each)")
    for degree, what in (("dp", "data-parallel replicas"), ("pp", "pipeline stages"), ("tp", "tensor shards")):
        parser.add_argument(f"--{degree}", type=options.WORKERS, help=f"with --devices: fix the {what} (default: chosen)")
    parser.add_argument("--schedule", choices=[*SCHEDULE_NAMES, "auto"], default="1f1b",
                        help="torch's pipeline schedule, or auto: the least forecast step (default 1f1b)")
    parser.add_argument("--stages-per-rank", type=_per_rank, default=None,
                        help="stages on each rank for interleaved-1f1b, looped-bfs, interleaved-zb (default 2)")
    parser.add_argument("--microbatches", type=_microbatches,
                        help=f"micro-batches per step, >= 1 (default {MICROBATCHES}, or the largest count below "
                             "that divides the batch), or auto with --schedule auto")
    parser.add_argument("--batch", type=options.SIZE, help="samples per step, a multiple of --microbatches "
                                                  "(default: 2 per micro-batch; module:function without batch= keeps its own)")
    parser.add_argument("--size", choices=["tiny", "full"], default="tiny", help="zoo configuration (default tiny)")
    parser.add_argument("--memory", type=options.MEMORY,
                        help="bytes per device, > 0; a plan whose rank exceeds it under the schedule (after any "
                             "activation recomputation, see --recompute) is refused")
    parser.add_argument("--recompute", choices=["auto", "never", "all"], default="auto",
                        help="activation recomputation under --memory: auto recomputes on the stages whose rank fits "
                             "only so, chosen with the split for the least forecast step (default); never keeps every "
                             "activation; all recomputes on every stage (as Megatron-LM's runs recompute every layer)")
    parser.add_argument("--optimizer", choices=["none", "sgd", "adam", "mixed-adam"], default="none",
                        help="optimizer state counted in stage memory: per parameter byte sgd 1, adam 2, mixed-adam 6 "
                             "(fp32 master weights and moments of 16-bit parameters) (default none)")
    parser.add_argument("--inference", action="store_true", help="plan inference (forward only) instead of training")
    parser.add_argument("--granularity", choices=["block", "layer"], default="block",
                        help="candidate split points: blocks of containers (default) or every module called once")
    parser.add_argument("--method", default="auto", help="auto (exact DP when it fits) or a partition method name")
    parser.add_argument("--time-limit", type=options.SECONDS, metavar="S",
                        help="wall seconds for the whole command, > 0: loading, capture, measurement (its repeats stop "
                             "early, each segment timed once at least), split, schedule search, bound and the files "
                             "(with --schedule auto the choices share it); a step it cuts short keeps its incumbent "
                             "and the answer says status time_limit and what was not tried. --run and --calibrate "
                             "runs (and their probe of torch's runtime) come outside it, each within --timeout. "
                             "Default: none (with -k each step stops at its own 10 s; with --devices each mesh shape's "
                             "search runs to its end)")
    parser.add_argument("--repeats", type=options.POSITIVE, default=5, help="timed runs per segment, >= 1 (default 5)")
    parser.add_argument("--seed", type=options.SEED, default=0, help="seed of the model's weights and inputs")
    parser.add_argument("--out", dest="folder", default="devplace-plan",
                        help="folder for plan.json, graph.json, run_pipeline.py (default ./devplace-plan)")
    parser.add_argument("--all-ranks", action="store_true",
                        help="use all -k ranks, one stage each, even where fewer stages forecast a shorter step "
                             "(the plan names the ranks it leaves out and why)")
    parser.add_argument("--run", action="store_true", help="run the plan under torchrun here after planning")
    parser.add_argument("--nodes", type=options.WORKERS, default=1, help="torchrun nodes on loopback for --run, >= 1 (default 1)")
    parser.add_argument("--check", action="store_true", help="with --run: compare outputs and gradients with the model")
    parser.add_argument("--steps", type=options.POSITIVE, default=3, help="measured steps of --run / --calibrate, >= 1 (default 3)")
    parser.add_argument("--calibrate", action="store_true",
                        help="run, fit forward/backward scale factors, re-plan, run again; report the error before and after")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="time segments and run stages on CPU (gloo) or GPUs (CUDA events, NCCL)")
    parser.add_argument("--spec", choices=list(SPECS),
                        help="time segments by this GPU's roofline (FLOPs and bytes of each kernel; deterministic) "
                             "instead of measuring them here")
    parser.add_argument("--timeout", type=options.SECONDS, default=600.0, help="seconds for each torchrun, > 0 (default 600)")
    parser.add_argument("--emit", nargs=2, metavar=("FORMAT", "FILE"),
                        help="also write the plan for a trainer: 'torchtitan FILE' writes torchtitan's job config "
                             "(TOML: pipeline degree, schedule, micro-batch size, each stage's module names)")
    parser.add_argument("--json", action="store_true", help="print the answer as one JSON object")


def _validate(args: argparse.Namespace) -> None:
    """What the option types cannot see alone: combinations."""
    from ..schedules.simulate import SCHEDULES, stages_per_rank

    if args.devices is None and any(getattr(args, d) is not None for d in ("dp", "pp", "tp")):
        raise UsageError("--dp, --pp and --tp fix degrees of a mesh: give --devices N too")
    if (args.accelerators is None) == (args.devices is None):
        raise UsageError("give -k K (pipeline ranks) or --devices N (data, tensor and pipeline parallelism planned "
                         "together), one of them")
    if args.devices is not None:
        mesh_only = [f for f, on in (("--stages-per-rank", args.stages_per_rank is not None),
                                     ("--all-ranks", args.all_ranks), ("--calibrate", args.calibrate),
                                     ("--nodes", args.nodes > 1), ("--emit", args.emit is not None),
                                     ("--method", args.method != "auto"), ("--microbatches auto",
                                                                            args.microbatches == "auto")) if on]
        if mesh_only:
            raise UsageError(f"{mesh_only[0]} shapes a pipeline of -k ranks; with --devices leave it out")
        if args.check and args.devices < 2:
            raise UsageError("--check compares a split run with the unsplit model, and one device splits nothing: "
                             "give --devices 2 or more")
        if args.run and args.inference:
            raise UsageError("--run with --devices trains the mesh (the runner's check compares gradients); plan "
                             "--inference without --run")
        if args.run and args.schedule not in ("gpipe", "1f1b"):
            raise UsageError(f"--run with --devices runs gpipe or 1f1b (one stage a rank) on the mesh; --schedule "
                             f"{args.schedule} plans without --run")
    if args.spec is not None and args.device == "cuda":
        raise UsageError("--spec times segments by a roofline, --device cuda measures them on the GPU: give one")
    if args.microbatches == "auto" and args.schedule != "auto":
        raise UsageError("--microbatches auto needs --schedule auto")
    if args.stages_per_rank is not None:
        if args.schedule == "auto":
            raise UsageError("--stages-per-rank names one schedule's layout; with --schedule auto leave it out")
        if SCHEDULES[args.schedule].fixed and args.stages_per_rank != SCHEDULES[args.schedule].per_rank:
            stages_per_rank(args.schedule, args.stages_per_rank)  # the one-line refusal
    if args.batch is not None and args.microbatches not in (None, "auto") and args.batch % args.microbatches:
        from ..pipeline.planner import indivisible

        raise UsageError(indivisible(args.batch, args.microbatches))
    if args.check and not args.run:
        raise UsageError("--check needs --run: it checks the run against the unsplit model (--calibrate's runs are "
                         "not checked)")
    if args.nodes > 1 and not (args.run or args.calibrate):
        raise UsageError("--nodes needs --run (or --calibrate)")
    if args.emit is not None:
        from ..files import check_output

        if args.emit[0] != "torchtitan":
            raise UsageError(f"--emit {args.emit[0]}: unknown format; the one known is torchtitan (--emit torchtitan FILE)")
        if args.inference:
            raise UsageError("--emit torchtitan: torchtitan trains, and --inference plans inference; leave one out")
        check_output(args.emit[1])
    if not args.folder:  # Path("") is ".": the plan's files would land in the current folder unasked
        raise UsageError("--out: an empty name; name a folder for the plan's files")
    if os.path.lexists(args.folder) and not os.path.isdir(args.folder):
        raise UsageError(f"--out {args.folder}: exists and is not a folder; name a folder for the plan's files")
    if os.path.isdir(args.folder):  # its files, before the model is profiled (a FIFO there, a folder)
        from ..files import check_output
        from ..pipeline.pipeline_plan import PLAN_FILES

        for name in PLAN_FILES.values():
            check_output(os.path.join(args.folder, name))


def command_line(args: argparse.Namespace) -> str:
    size = ["-k", str(args.accelerators)] if args.devices is None else ["--devices", str(args.devices)] + [
        w for d in ("dp", "pp", "tp") if getattr(args, d) is not None for w in (f"--{d}", str(getattr(args, d)))]
    words = ["devplace", "plan", args.model, *size, "--schedule", args.schedule,
             "--microbatches", str(args.microbatches)]
    if args.stages_per_rank is not None:
        words += ["--stages-per-rank", str(args.stages_per_rank)]
    for flag, value in (("--batch", args.batch), ("--memory", args.memory), ("--method", args.method)):
        if value is not None:
            words += [flag, str(value)]
    if args.recompute != "auto":
        words += ["--recompute", args.recompute]
    words += ["--optimizer", args.optimizer, "--granularity", args.granularity, "--seed", str(args.seed)]
    if args.spec is not None:
        words += ["--spec", args.spec]
    words += [f for f, on in (("--inference", args.inference), ("--all-ranks", args.all_ranks), ("--run", args.run),
                              ("--check", args.check), ("--calibrate", args.calibrate)) if on]
    if args.emit is not None:
        words += ["--emit", *args.emit]
    return " ".join(shlex.quote(w) for w in words)


def run(args: argparse.Namespace) -> int:
    _validate(args)
    from ..pipeline.calibration import calibrate, message_price
    from ..solve import plan
    from ..pipeline.torchrun import launch
    from ..zoo import load

    # the zoo's models take the batch to build: 2 samples per micro-batch unless --batch says
    batch = args.batch or 2 * (args.microbatches if isinstance(args.microbatches, int) else MICROBATCHES)
    model, inputs = load(args.model, size=args.size, batch=batch, seed=args.seed)
    mesh = args.devices is not None
    common = dict(training=not args.inference, memory=args.memory, optimizer=args.optimizer,
                  granularity=args.granularity, time_limit=args.time_limit, seed=args.seed,
                  repeats=args.repeats, model_spec=args.model, device=args.device, spec=args.spec,
                  recompute=args.recompute, started=getattr(args, "started", None))
    if mesh:
        common.update(devices=args.devices, degrees={d: getattr(args, d) for d in ("dp", "pp", "tp")})
    else:
        # a checked run checks a split: one stage (a forecast that splitting does not pay) checks nothing
        common.update(k=args.accelerators, method=args.method, per_rank=args.stages_per_rank,
                      least_ranks=args.accelerators if args.all_ranks else 2 if args.check and args.accelerators > 1
                      else 1)
    if (args.run or args.calibrate) and args.device == "cpu" and args.spec is None and (args.devices or
                                                                                         args.accelerators) > 1:
        # the run's backend on this machine prices the runtime's work around each pass; the probe
        # is a run, outside --time-limit like the runs themselves
        t = time.monotonic()
        common["action_ms"] = message_price(timeout=args.timeout)
        if common["started"] is not None:
            common["started"] += time.monotonic() - t
    p = plan(model, inputs, microbatches=args.microbatches, schedule=args.schedule, **common)
    if args.microbatches != "auto":
        args.microbatches = p.microbatches * p.dp  # the command line as planned
    if mesh:
        return _answer_mesh(p, args)
    if args.check and p.num_stages < 2:
        raise UsageError(f"--check compares a split run with the unsplit model, and this plan has one stage (-k "
                         f"{args.accelerators}, {args.schedule}): give -k 2 or more")
    if args.check and args.accelerators > 1 and not args.all_ranks:
        p.notes.append("--check: planned over 2 ranks or more, so that the run it checks is split")
    emitted = None if args.emit is None else _torchtitan_job(p, model, args)  # refused before anything is written
    paths = p.write(args.folder)
    if emitted is not None:
        from ..files import write_text_atomic

        write_text_atomic(args.emit[1], emitted.pop("text"))
    answer: dict[str, Any] = {"command": command_line(args), **p.to_json(),
                              "files": {k: str(v) for k, v in paths.items()},
                              "torchrun": f"torchrun --nproc-per-node {p.ranks} {paths['script']}"}
    if emitted is not None:
        answer["emitted"] = emitted
    if args.run:
        answer["run"] = launch(paths["plan"], nodes=args.nodes, steps=args.steps, check=args.check,
                               timeout=args.timeout, device=args.device)
    if args.calibrate:
        answer["calibration"] = calibrate(p, args.folder, steps=args.steps, nodes=args.nodes, timeout=args.timeout,
                                          device=args.device)
    check = answer.get("run", {}).get("check")
    failure = None if check is None else check.get("failure")
    if check is not None:
        answer["success"] = failure is None
    if args.json:
        print_json(answer)
    else:
        _print(answer)
    if failure is not None:  # a check that fails fails the command: status 1, one line
        print(f"devplace: {failure}", file=sys.stderr)
        return 1
    return 0


def _answer_mesh(p: Any, args: argparse.Namespace) -> int:
    """``--devices``: write the mesh plan, run it (``--run``) on the mesh runner, answer."""
    paths = p.write(args.folder)
    world = p.dp * p.ranks * p.tp
    answer: dict[str, Any] = {"command": command_line(args), **p.to_json(),
                              "files": {k: str(v) for k, v in paths.items()},
                              "torchrun": f"torchrun --nproc-per-node {world} {paths['script']}"}
    if args.run:
        from ..pipeline.mesh_run import launch

        answer["run"] = launch(args.model, dp=p.dp, pp=p.ranks, tp=p.tp, microbatches=p.microbatches,
                               batch=p.batch * p.dp, seed=args.seed, points=p.split_points, schedule=p.schedule,
                               steps=args.steps, check=args.check, timeout=args.timeout, device=args.device)
    check = answer.get("run", {}).get("check")
    if check is not None:
        answer["success"] = bool(check["passed"])
    if args.json:
        print_json(answer)
    else:
        _print_mesh(answer)
    if check is not None and not check["passed"]:
        print(f"devplace: the run differs from the unsplit model: outputs within {check['max_output_diff']}, "
              f"gradients within {check['max_grad_diff']}", file=sys.stderr)
        return 1
    return 0


def _print_mesh(a: dict[str, Any]) -> None:
    m, fc = a["mesh"], a["forecast"]
    gap = "unknown" if m["gap"] is None else f"{100 * m['gap']:.2g} %"
    bound = "none" if m["bound_ms"] is None else f"{m['bound_ms']:.3f} ms"
    print(f"{a['model']}: {a['devices']} device(s) as dp {a['dp']} x pp {a['ranks']} x tp {a['tp']}, {a['schedule']} "
          f"with {a['microbatches']} micro-batch(es) of {a['microbatch']} per replica ({a['segments']} segments, "
          f"{a['capture']})")
    for note in a["notes"]:
        print(f"  note: {note}")
    print(f"forecast step {m['step_ms']:.3f} ms (pipeline {fc['step_ms']:.3f} + data-parallel all-reduce "
          f"{m['allreduce_ms']:.3f}), {m['samples_per_s']:.1f} samples/s; {m['status']} over "
          f"{len(m['tried'])} mesh shape(s) and schedule(s), proven bound {bound}, gap {gap}")
    for s, (segs, mem) in enumerate(zip(a["stage_segments"], a["stage_memory"])):
        print(f"  stage {s}: begins at {a['segment_names'][segs[0]]:40s} {len(segs):3d} segment(s)  peak memory "
              f"{mem['peak'] / 2**20:8.2f} MiB per device{', recomputed' if mem.get('recompute') else ''}")
    print(f"split points: {a['split_points']}")
    print(f"wrote {a['files']['plan']} and {a['files']['script']}; run: {a['torchrun']}")
    if "run" in a:
        r = a["run"]
        cpu = [min(x["step_cpu_ms"]) for x in r["ranks"]]
        print(f"torchrun ({len(r['ranks'])} processes): step {r['step_wall_ms']:.1f} ms wall (forecast "
              f"{a['mesh']['step_ms']:.1f}), CPU ms per rank {min(cpu):.1f}-{max(cpu):.1f}")
        if "check" in r:
            c = r["check"]
            print(f"check {'passed' if c['passed'] else 'FAILED'}: outputs within {c['max_output_diff']:.3g}, "
                  f"{c['parameters_checked']} parameters' gradients ({c['sharded_checked']} sharded) within "
                  f"{c['max_grad_diff']:.3g} of the unsplit model's")
    sys.stdout.flush()


def _torchtitan_job(p: Any, model: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The plan as torchtitan's job config: its TOML text, its path and its stages' module names."""
    from ..pipeline.titan import job_config, to_toml

    config = job_config(p, model)
    header = [f"torchtitan job config written by {command_line(args)}",
              f"read it with --job.config_file {args.emit[1]}, or copy its sections into your own job config"]
    return {"format": "torchtitan", "file": args.emit[1], "text": to_toml(config, header),
            "module_fqns_per_model_part": config["parallelism"]["module_fqns_per_model_part"]}


def _print(a: dict[str, Any]) -> None:
    gap = "unknown" if a["gap"] is None else f"{100 * a['gap']:.1f} %"
    # inference runs the schedule's forwards only: no 1F1B interleaving to speak of
    how = a["schedule"] if a["training"] else f"inference (forwards only, in {a['schedule']}'s order)"
    print(f"{a['model']}: {a['segments']} segments ({a['capture']}), {a['stages']} stage(s) of k={a['k']} by "
          f"{a['method']} ({a['method_status']}), {how} with {a['microbatches']} micro-batches of "
          f"{a['microbatch']}")
    if a["stopped"]:
        print(f"  time limit {a['time_limit']:g} s: cut short {', '.join(a['stopped'])} (status time_limit: the "
              "incumbent and its bound)")
    for note in a["notes"]:
        print(f"  note: {note}")
    print(f"least bottleneck {a['objective_ms']:.3f} ms per micro-batch, proven bound {a['bound_ms']:.3f} ms, gap {gap}")
    fc, ss = a["forecast"], a["schedule_search"]
    if ss is not None:
        sgap = "unknown" if ss["gap"] is None else f"{100 * ss['gap']:.1f} %"
        print(f"{a['torch_schedule']} on {a['ranks']} rank(s) x {a['stages_per_rank']} stage(s), stage -> rank "
              f"{a['stage_to_rank']}: forecast step {fc['step_ms']:.3f} ms ({ss['status']}, proven bound "
              f"{ss['bound_ms']:.3f} ms, gap {sgap}; {ss['method']})")
        print("  rank idle ms " + ", ".join(f"{x:.2f}" for x in fc["rank_idle_ms"]) + "; rank peak MiB "
              + ", ".join(f"{x / 2**20:.2f}" for x in fc["rank_peak_bytes"]))
    for s, (segs, mem) in enumerate(zip(a["stage_segments"], a["stage_memory"])):
        begin = a["segment_names"][segs[0]]
        print(f"  stage {s}: begins at {begin:40s} {len(segs):3d} segment(s)  load {fc['load_ms'][s]:8.3f} ms  "
              f"peak memory {mem['peak'] / 2**20:8.2f} MiB ({mem['microbatches_in_flight']} in flight"
              f"{', recomputed' if mem.get('recompute') else ''})")
    for t in a["tied"]:
        print(f"  tied {t['parameter']}: {t['handling']}")
    print(f"split points: {a['split_points']}")
    f = a["files"]
    print(f"wrote {f['plan']} (the plan), {f['graph']} (the segments' graph) and {f['script']}; "
          f"run: {a['torchrun']}")
    if "emitted" in a:
        e = a["emitted"]
        print(f"wrote {e['file']} (torchtitan job config), stages' modules: "
              + " | ".join(", ".join(part) for part in e["module_fqns_per_model_part"]))
    if "run" in a:
        r = a["run"]
        meas = ", ".join(f"{x:.2f}" for x in r["stage_cpu_ms"])
        print(f"torchrun ({r['nodes']} node(s), {r['backend']}): stage CPU ms per micro-batch {meas}; "
              f"step {r['step_ms']:.1f} ms wall, {r['step_cpu_replay_ms'] or float('nan'):.2f} ms replayed from its "
              "CPU times; peak MiB per rank " + ", ".join(f"{x / 2**20:.2f}" for x in r["peak_memory"]))
        if "check" in r:
            c = r["check"]
            grads = (f", {c['parameters_checked']} parameters' gradients within {c['max_grad_diff']:.3g}"
                     if "grads_allclose" in c else "")
            print(c["failure"] if c.get("failure") else
                  f"check passed: outputs within {c['max_output_diff']:.3g} of the unsplit model's{grads}")
    if "calibration" in a:
        c = a["calibration"]
        print(f"calibration (one factor per stage and action kind): largest per-stage error "
              f"{100 * c['max_error_before']:.1f} % before, {100 * c['max_error_after']:.1f} % after; kept the "
              f"{c['kept']} plan")
    sys.stdout.flush()
