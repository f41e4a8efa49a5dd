"""``devplace profile MODEL``: profile a zoo model into a graph file.

Roofline specs (V100, A100, H100, H200) build the model on the meta device, so even the full-size
networks profile in a second and give the same file on every machine; ``cpu-measured`` and
``cuda-measured`` build real weights and time every node here, with a progress bar.
torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys

from .. import options
from ..devices import SPECS
from ..errors import GraphError
from ..zoo import MODELS, SIZES
from . import print_json

HELP = "profile a zoo model (torch) into a graph: roofline of a named GPU, or measured here"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog, parser.formatter_class = options.NAMES_RULE, argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", help=f"zoo model: {', '.join(sorted(MODELS))}")
    parser.add_argument("--granularity", choices=["layer", "op"], default="layer",
                        help="one node per layer (default) or per operator")
    parser.add_argument("--spec", choices=["cpu-measured", "cuda-measured", *SPECS], default="V100",
                        help="roofline of a named accelerator (default V100), or times measured here")
    parser.add_argument("--training", action="store_true", help="add backward nodes (forward + backward graph)")
    parser.add_argument("--batch", type=options.SIZE, default=1, help="batch size of the example input (default 1)")
    parser.add_argument("--size", choices=list(SIZES), default="full",
                        help="full: the published network (default); tiny: a small one for quick runs")
    parser.add_argument("--out", required=True, help="graph file to write (native JSON, written atomically)")
    parser.add_argument("--repeats", type=options.POSITIVE, default=20, help="timed runs per node, measured specs (default 20)")
    parser.add_argument("--warmup", type=options.NON_NEGATIVE, default=3, help="untimed runs per node first (default 3)")
    parser.add_argument("--threads", type=options.WORKERS, default=1,
                        help="cpu-measured: CPU threads for p_acc (default 1: one thread, as one pipeline stage per "
                             "core gets; recorded in the graph's meta as 'threads')")
    parser.add_argument("--seed", type=options.SEED, default=0, help="seed of the weights and the example input")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout")


def command_line(args: argparse.Namespace) -> str:
    """The command that makes this graph (without ``--out``), recorded in the graph's meta."""
    words = ["devplace", "profile", args.model, "--granularity", args.granularity, "--spec", args.spec,
             "--batch", str(args.batch), "--size", args.size, "--seed", str(args.seed)]
    if args.training:
        words.append("--training")
    if args.spec in ("cpu-measured", "cuda-measured"):
        words += ["--repeats", str(args.repeats), "--warmup", str(args.warmup)]
        if args.spec == "cpu-measured":
            words += ["--threads", str(args.threads)]
    return " ".join(words)


def run(args: argparse.Namespace) -> int:
    if args.model not in MODELS:
        raise GraphError(f"unknown zoo model {args.model!r}; known: {', '.join(sorted(MODELS))}")
    from ..io import save_graph
    from ..pipeline.profile import MEASURED, profile

    entry = MODELS[args.model]
    measured = args.spec in MEASURED
    model = entry.build(args.size, seed=args.seed, device=None if measured else "meta")
    inputs = entry.example_input(args.size, args.batch, seed=args.seed)
    graph = profile(model, inputs, granularity=args.granularity, spec=args.spec, training=args.training,
                    batch=args.batch, repeats=args.repeats, warmup=args.warmup, progress=not args.no_progress,
                    name=args.model, config={"size": args.size, **entry.config(args.size)}, threads=args.threads)
    graph.meta["command"] = command_line(args)
    save_graph(graph, args.out)
    summary = {"out": args.out, "name": graph.name, "nodes": graph.n, "edges": graph.m,
               "backward_nodes": int(graph.backward.sum()), "flops": graph.meta["flops"],
               "total_acc_ms": float(graph.p_acc.sum()), "total_cpu_ms": float(graph.p_cpu.sum()),
               "times": graph.meta["times"], "device": graph.meta.get("device", graph.meta["spec"]["name"])}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.out}: {graph.n} nodes, {graph.m} edges, {summary['flops'] / 1e9:.3g} GFLOP, "
              f"{summary['total_acc_ms']:.4g} ms on {summary['device']}", file=sys.stderr)
    return 0
