"""``devplace place-rl``: train a Placeto policy on a graph family, or place a graph with one.

    devplace place-rl train --family layered --sizes 8 24 -k 3 --episodes 3000 --out policy.pt
    devplace place-rl place GRAPH --checkpoint policy.pt [-k K] [--samples N] [--json]

``place`` prints the ``--json`` contract of `devplace_lite.result.Result` (``objective`` is the
cost model's max-load of the placement, as for every method) plus ``simulated_runtime`` (the
run time the policy minimised, in the checkpoint's simulator), ``initial_runtime``,
``sim_calls`` and ``episodes``. torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys

from .. import options
from . import emit, print_json

HELP = "train a Placeto-style RL placer, or place a graph with a trained checkpoint"

#: Devices a policy is trained for: its network has an output per device.
TRAIN_DEVICES = options.Int(0, 1024)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    t = sub.add_parser("train", help="train a policy on graphs of a family (or on given graph files)")
    t.add_argument("--family", default="layered", help="generator family (default layered)")
    t.add_argument("--sizes", type=options.Int(2, 100_000), nargs=2, default=[8, 24], metavar=("MIN", "MAX"),
                   help="node counts of the training graphs (2..100000, default 8 24)")
    t.add_argument("--graphs", type=options.Int(1, 1000), default=32, help="number of training graphs (1..1000, default 32)")
    t.add_argument("--graph", action="append", default=[], metavar="FILE",
                   help="train on this graph file instead of a family (repeatable)")
    t.add_argument("-k", "--accelerators", type=TRAIN_DEVICES, default=3, help="0..1024 (default 3)")
    t.add_argument("--cpus", type=TRAIN_DEVICES, default=0, help="0..1024 (default 0)")
    t.add_argument("--episodes", type=options.POSITIVE, default=3000)
    t.add_argument("--batch", type=options.Int(1, 4096), default=8, help="episodes per update (1..4096, default 8)")
    t.add_argument("--lr", type=options.RATE, default=3e-3, help="learning rate, (0, 10] (default 0.003)")
    t.add_argument("--entropy", type=options.WEIGHT, default=0.02, help="entropy bonus at the start (default 0.02)")
    t.add_argument("--hidden", type=options.Int(1, 4096), default=32, help="hidden units (1..4096, default 32)")
    t.add_argument("--reward", choices=["step", "end"], default="step")
    t.add_argument("--no-message-passing", action="store_true", help="the ablation: no graph sweeps")
    t.add_argument("--threads", type=options.WORKERS, default=1, help="torch CPU threads (1..1024, default 1)")
    t.add_argument("--seed", type=options.SEED, default=0)
    t.add_argument("--out", required=True, help="checkpoint file to write")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--json", action="store_true", help="print a JSON summary")

    p = sub.add_parser("place", help="place a graph with a trained policy (no training)")
    p.add_argument("graph")
    p.add_argument("--checkpoint", required=True)
    options.add_cluster_args(p, k_default="the checkpoint's", l_default="the checkpoint's")
    p.add_argument("--samples", type=options.Int(0, 100_000), default=0,
                   help="sampled episodes beside the greedy one (0..100000, default 0)")
    p.add_argument("--seed", type=options.SEED, default=0)
    p.add_argument("--out", help="also write the JSON answer to this file")
    p.add_argument("--json", action="store_true")


def _train(args: argparse.Namespace) -> int:
    from ..io import load_graph
    from ..rl.train import TrainConfig, family_graphs, train

    cfg = TrainConfig(family=args.family, sizes=tuple(args.sizes), graphs=args.graphs,
                      accelerators=args.accelerators, cpus=args.cpus, episodes=args.episodes,
                      batch=args.batch, lr=args.lr, entropy=args.entropy, hidden=args.hidden,
                      reward=args.reward, message_passing=not args.no_message_passing,
                      threads=args.threads, seed=args.seed, progress=not args.quiet)
    graphs = [load_graph(path) for path in args.graph] or None
    if graphs is None:
        family_graphs(cfg.family, cfg.sizes, 1, cfg.seed)  # bad family or sizes: fail before training
    model = train(cfg, graphs)
    if graphs is not None:
        model.history["graphs"] = [g.name for g in graphs]
    model.save(args.out)
    summary = {"checkpoint": args.out, "seconds": round(model.seconds, 3),
               "cpu_seconds": round(model.cpu_seconds, 3), "sim_calls": model.sim_calls,
               "episodes": cfg.episodes, "final_ratio": model.history["ratio"][-1], "config": cfg.to_dict()}
    if args.json:
        print_json(summary)
    else:
        print(f"wrote {args.out}: {cfg.episodes} episodes in {model.seconds:.1f} s ({model.cpu_seconds:.1f} s CPU), "
              f"{model.sim_calls} simulator "
              f"calls, last run time / initial {model.history['ratio'][-1]:.3f}", file=sys.stderr)
    return 0


def _place(args: argparse.Namespace) -> int:
    from ..cost import evaluate
    from ..devices import Cluster
    from ..io import load_graph
    from ..result import Result, no_feasible_status
    from ..rl.train import load, place

    graph = load_graph(args.graph)
    model = load(args.checkpoint)
    cfg = model.config
    k = cfg.accelerators if args.accelerators is None else args.accelerators
    cpus = cfg.cpus if args.cpus is None else args.cpus
    # not clamped to the graph: the checkpoint's device count is the one a policy can place on
    cluster = Cluster.for_graph(graph, k, cpus, args.memory)
    out = place(model, graph, cluster, samples=args.samples, seed=args.seed)
    ev = evaluate(graph, cluster, out.assignment)
    res = Result("place-rl", graph, cluster, out.assignment, ev.max_load,
                 "feasible" if ev.feasible else no_feasible_status(graph, cluster), out.seconds,
                 extra={"simulated_runtime": out.runtime, "initial_runtime": out.initial,
                        "sim_calls": out.sim_calls, "episodes": out.episodes, "checkpoint": args.checkpoint,
                        "simulator": cfg.params, **({"violations": ev.violations} if not ev.feasible else {})})
    answer = res.to_json()
    if emit(answer, args):
        return 0
    print(f"place-rl: simulated run time {out.runtime:.6g} ms (from {out.initial:.6g}), max-load "
          f"{ev.max_load:.6g}, {out.sim_calls} simulator calls, {out.seconds:.3f}s, split {ev.split}")
    for d, x in answer.get("loads", {}).items():
        print(f"  {d:6s} {x:.6g}")
    return 0


def run(args: argparse.Namespace) -> int:
    return _train(args) if args.action == "train" else _place(args)
