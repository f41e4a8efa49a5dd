"""``devplace pipeline``: run a partitioned model as a real torch pipeline, or time its stages.

::

    devplace pipeline run    --model NAME (--method M | --placement FILE [--graph G]) -k K
                             [--microbatches N] [--batch B] [--schedule gpipe|1f1b] [--training]
                             [--device cpu|cuda] [--check] [--json] [--out FILE]
    devplace pipeline stages --model NAME (--method M | --placement FILE [--graph G]) -k K
                             [--device cpu|cuda] [--training] [--json] [--out FILE]

``run`` profiles the model on one micro-batch, splits it with the method (or the given
placement of a profiled graph), starts one process per stage (gloo on CPU, NCCL on GPUs) and
prints the measured step time, throughput, busy time per stage, bubble and memory next to the
cost model's forecast. ``stages`` times each stage alone in one process: with ``--device
cuda`` on a machine with one GPU it forecasts a k-GPU pipeline of that GPU.

Errors (one line, exit status 2): more stages than CPU cores or GPUs, a stage over
``--memory``, an unknown model or method, a placement that is not a chain of stages.
torch is imported inside `run`, never when the CLI starts.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from .. import options
from ..graph import GraphError
from . import emit

HELP = "run a partitioned model as a real torch pipeline (one process per stage), or time its stages"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    for action, help_ in (("run", "run the stages as a pipeline, one process per stage, and measure it"),
                          ("stages", "time each stage alone in one process (one GPU forecasts k GPUs)")):
        p = sub.add_parser(action, help=help_)
        p.add_argument("--model", required=True,
                       help="a zoo model name (resnet50, inception, bert, gnmt, gpt) or module:function "
                            "returning (model, example inputs of the whole batch); the function is "
                            "called with batch= and seed= when it takes them")
        p.add_argument("--size", default="tiny", help="zoo configuration: tiny (default) or full")
        how = p.add_mutually_exclusive_group(required=True)
        how.add_argument("--method", help="a partitioning method (see devplace partition)")
        how.add_argument("--placement", help="a placement file (devplace partition --out) of --graph")
        p.add_argument("--graph", help="the profiled graph the placement refers to (default: profile now)")
        # one process per stage (run), one array slot per device: bounded like plan's -k
        p.add_argument("-k", "--stages", type=options.WORKERS, default=2, help="devices, one stage each, 1..1024 (default 2)")
        p.add_argument("--microbatches", type=options.SIZE, default=4, help="micro-batches per step (default 4)")
        p.add_argument("--batch", type=options.SIZE, help="samples per step (default 4 per micro-batch)")
        p.add_argument("--training", action="store_true", help="forward, loss (MSE to a random target) and backward")
        p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        p.add_argument("--granularity", choices=["layer", "op"], default="layer")
        p.add_argument("--spec", help="profiler spec (default cpu-measured, or cuda-measured with --device cuda)")
        p.add_argument("--memory", type=options.MEMORY, help="bytes per device; a stage over it is an error")
        p.add_argument("--time-limit", type=options.SECONDS, help="seconds for the partitioning method")
        p.add_argument("--seed", type=options.SEED, default=0)
        p.add_argument("--repeats", type=options.POSITIVE, default=10, help="profiler (and stage timing) repeats")
        p.add_argument("--json", action="store_true")
        p.add_argument("--out", help="also write the JSON answer to this file")
        if action == "run":
            p.add_argument("--schedule", choices=["gpipe", "1f1b"], default="gpipe")
            p.add_argument("--steps", type=options.POSITIVE, default=5, help="measured steps (default 5)")
            p.add_argument("--warmup", type=options.NON_NEGATIVE, default=1, help="unmeasured first steps (default 1)")
            p.add_argument("--check", action="store_true",
                           help="compare outputs (and gradients) with the unsplit model")
            p.add_argument("--timeout", type=options.SECONDS, default=300.0, help="seconds before a stuck stage fails")


def _plan(args: argparse.Namespace, model, micro: tuple, threads: int | None):
    from ..devices import Cluster
    from ..io import load_graph, load_placement
    from ..pipeline import build_plan, plan_model
    from ..pipeline.profile import profile

    spec = args.spec or ("cuda-measured" if args.device == "cuda" else "cpu-measured")
    if args.method:
        graph = load_graph(args.graph) if args.graph else None
        return plan_model(model, micro, method=args.method, k=args.stages, spec=spec, training=args.training,
                          granularity=args.granularity, memory=args.memory, graph=graph, threads=threads,
                          time_limit=args.time_limit, seed=args.seed, repeats=args.repeats)
    if args.graph:
        graph = load_graph(args.graph)
    else:
        from ..pipeline import torch_threads

        with torch_threads(threads):
            graph = profile(model, micro, granularity=args.granularity, spec=spec, training=args.training,
                            repeats=args.repeats, progress=False, threads=threads)
    cluster = Cluster.for_graph(graph, accelerators=args.stages, cpus=0, memory=args.memory)
    plan = build_plan(model, micro, graph, cluster, load_placement(args.placement, graph, cluster),
                      granularity=args.granularity, method="placement")
    plan.check_memory()
    return plan


def _check(model, inputs: tuple, target, loss_fn, run) -> dict[str, Any]:
    """How far the pipeline's outputs (and gradients) are from the unsplit model's."""
    import torch

    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(loss_fn is not None):
        ref = model(*inputs)
        if loss_fn is not None:
            loss_fn(ref, target).backward()
    out = {"outputs_allclose": bool(torch.allclose(run.output, ref.detach(), rtol=1e-4, atol=1e-5)),
           "max_output_diff": float((run.output - ref.detach()).abs().max())}
    if loss_fn is not None:
        diffs = [float((run.grads[n] - p.grad).abs().max()) for n, p in model.named_parameters() if p.grad is not None]
        out["grads_allclose"] = all(torch.allclose(run.grads[n], p.grad, rtol=1e-4, atol=1e-5)
                                    for n, p in model.named_parameters() if p.grad is not None)
        out["max_grad_diff"] = max(diffs, default=0.0)
        out["parameters_checked"] = len(diffs)
    return out


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this answer (recorded with every result)."""
    parts = ["devplace", "pipeline", args.action, "--model", args.model, "--size", args.size]
    parts += ["--method", args.method] if args.method else ["--placement", args.placement]
    for flag, value in (("--graph", args.graph), ("-k", args.stages), ("--microbatches", args.microbatches),
                        ("--batch", args.batch), ("--device", args.device), ("--granularity", args.granularity),
                        ("--spec", args.spec), ("--memory", args.memory), ("--time-limit", args.time_limit),
                        ("--seed", args.seed), ("--repeats", args.repeats),
                        ("--schedule", getattr(args, "schedule", None)), ("--steps", getattr(args, "steps", None)),
                        ("--warmup", getattr(args, "warmup", None))):
        if value is not None:
            parts += [flag, str(value)]
    parts += [flag for flag, on in (("--training", args.training), ("--check", getattr(args, "check", False))) if on]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    if args.stages < 1:
        raise GraphError(f"-k must be at least 1, got {args.stages}")
    if args.microbatches < 1:
        raise GraphError(f"--microbatches must be at least 1, got {args.microbatches}")
    from ..pipeline.resources import available_devices, check_resources

    if args.action == "run":
        check_resources(args.stages, args.device)  # fail before minutes of profiling
    elif args.device == "cuda" and available_devices("cuda") < 1:
        raise GraphError("--device cuda: torch sees no GPU on this machine")
    batch = args.batch or 4 * args.microbatches
    if batch % args.microbatches:
        raise GraphError(f"--batch {batch} does not split into {args.microbatches} equal micro-batches")

    import torch
    import torch.nn.functional as F

    from ..pipeline import check_forecast, device_name, measure_stages, run_pipeline

    from ..zoo import load

    model, inputs = load(args.model, size=args.size, batch=batch, seed=args.seed)
    if int(inputs[0].shape[0]) % args.microbatches:
        raise GraphError(f"batch of {int(inputs[0].shape[0])} does not split into {args.microbatches} micro-batches")
    mb = int(inputs[0].shape[0]) // args.microbatches
    micro = tuple(t[:mb] for t in inputs)
    cores = available_devices("cpu")
    threads = max(1, cores // args.stages) if args.device == "cpu" else None
    plan = _plan(args, model, micro, threads)
    loss_fn = target = None
    if args.training:
        with torch.no_grad():
            shape = model(*inputs).shape
        target = torch.randn(shape, generator=torch.Generator().manual_seed(args.seed))
        loss_fn = F.mse_loss
    answer: dict[str, Any] = {
        "command": _command(args), "model": args.model, "size": args.size, "method": plan.method, "k": args.stages,
        "batch": int(inputs[0].shape[0]), "microbatches": args.microbatches, "training": args.training,
        "device": device_name(args.device), "plan": plan.to_json(),
    }
    if args.action == "run":
        try:
            res = run_pipeline(plan.stages, inputs, target=target, loss_fn=loss_fn, schedule=args.schedule,
                               microbatches=args.microbatches, steps=args.steps, warmup=args.warmup,
                               device=args.device, memory=args.memory, return_grads=args.check, timeout=args.timeout)
        except RuntimeError as e:  # a stage process failed: its last line, not a traceback
            raise GraphError(str(e).splitlines()[0]) from None
        answer["run"] = res.to_json()
        answer["forecast"] = check_forecast(plan, res)
        if args.check:
            answer["check"] = _check(model, inputs, target, loss_fn, res)
    else:
        times = measure_stages(plan.stages, micro, target=None if target is None else target[:mb], loss_fn=loss_fn,
                               device=args.device, repeats=args.repeats, threads=threads)
        answer["stages"] = times.to_json()
        answer["forecast"] = check_forecast(plan, times, microbatches=args.microbatches)
        answer["predicted_throughput"] = times.predicted_throughput(plan.predicted_comm_ms)
    if emit(answer, args):
        return 0
    _print(answer)
    return 0


def _print(a: dict[str, Any]) -> None:
    plan, cmp_ = a["plan"], a["forecast"]
    print(f"{a['model']} ({a['size']}), {plan['stages']} stage(s) by {a['method']}, batch {a['batch']} "
          f"in {a['microbatches']} micro-batches, {'training' if a['training'] else 'inference'}, on {a['device']}")
    for s, (p, m) in enumerate(zip(cmp_["predicted_ms"], cmp_["measured_ms"])):
        print(f"  stage {s}: predicted {p:8.3f} ms   measured ({cmp_['clock']} time) {m:8.3f} ms   "
              f"ratio {m / p if p else float('nan'):.2f}")
    if "run" in a:
        r = a["run"]
        print(f"step {r['step_ms']:.2f} ms (GPipe formula from measured stages {r['formula_ms']:.2f} ms, "
              f"from the cost model {cmp_['predicted_step_ms']:.2f} ms)")
        print(f"throughput {r['throughput']:.1f} samples/s, bubble {r['bubble']:.2f} "
              f"(formula {r['formula_bubble']:.2f}), peak memory per stage {r['peak_memory']}")
        if "check" in a:
            print(f"check: {a['check']}")
    else:
        print(f"predicted {plan['stages']}-device throughput {a['predicted_throughput']:.1f} samples/s "
              f"(bottleneck {cmp_['measured_bottleneck_ms']:.3f} ms per micro-batch)")
