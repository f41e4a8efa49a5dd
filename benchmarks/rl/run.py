"""Benchmark: a Placeto trained for a few minutes on 2 CPU cores, on graphs it has never seen.

Targets (issue 8): on held-out graphs of the training family, the policy's simulated run time
within 5 % of the best classical baseline's (geometric mean over the graphs), and within 10 %
of the simulator's optimum on tiny graphs where exhaustive search gives it, after under 5
minutes of training. The figures are written whether or not the targets are met.

    python benchmarks/rl/run.py                       # train, evaluate, write results.json (~3 min)
    python benchmarks/rl/run.py --load data/checkpoints/placeto-layered-k3.pt   # evaluate only
    python benchmarks/rl/run.py --save data/checkpoints/placeto-layered-k3.pt   # also keep the policy

Every method is scored in the same simulator (`devplace_lite.sim`, Placeto's assumptions:
compute and transfers overlap, transfers queue on the sender's link, transfer time = the
graph's ``comm``). Simulator calls are counted per method.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch

from devplace_lite.io import load_graph, write_json_atomic
from devplace_lite.rl.compare import compare, summarize
from devplace_lite.rl.train import TrainConfig, held_out, load, scorer, train

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: The configuration of the shipped checkpoint (data/checkpoints/README.md).
CONFIG = dict(family="layered", sizes=(8, 24), graphs=32, accelerators=3, episodes=3000, batch=8, seed=0)
MEDIUM, TINY = (16, 24), (7, 9)
ZOO = ("gnmt_layer_inference", "bert_layer_inference", "gpt_layer_inference", "resnet50_layer_inference")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", help="evaluate this checkpoint instead of training")
    ap.add_argument("--save", help="write the trained policy here")
    ap.add_argument("--episodes", type=int, default=CONFIG["episodes"])
    ap.add_argument("--no-message-passing", action="store_true")
    ap.add_argument("--held-out", type=int, default=20, help="held-out graphs of 16-24 nodes")
    ap.add_argument("--tiny", type=int, default=10, help="held-out graphs of 7-9 nodes (exhaustive optimum)")
    ap.add_argument("--samples", type=int, default=8, help="sampled episodes of the best-of-N policy")
    ap.add_argument("--no-zoo", action="store_true", help="skip the zoo's inference graphs (data/graphs)")
    ap.add_argument("--out", default=str(HERE / "results.json"))
    ap.add_argument("--shipped", default=str(ROOT / "data" / "checkpoints" / "placeto-layered-k3.pt"),
                    help="compare the freshly trained weights with this checkpoint's")
    args = ap.parse_args([] if argv is None else argv)  # run_all calls main() with no arguments

    if args.load:
        model = load(args.load)
        trained_here = False
    else:
        cfg = TrainConfig(**{**CONFIG, "episodes": args.episodes}, message_passing=not args.no_message_passing,
                          progress=sys.stderr.isatty())
        model = train(cfg)
        trained_here = True
        if args.save:
            model.save(args.save)
    cfg = model.config
    same_as_shipped = None
    if trained_here and Path(args.shipped).exists():
        ref = load(args.shipped)
        same_as_shipped = ref.config.to_dict() == {**cfg.to_dict(), "progress": ref.config.progress} and all(
            torch.equal(a, b) for a, b in zip(ref.net.state_dict().values(), model.net.state_dict().values()))
    cluster, params = cfg.cluster(), cfg.sim_params()
    policies = {"placeto": scorer(model), f"placeto-best-of-{args.samples + 1}": scorer(model, args.samples)}

    t0 = time.perf_counter()
    medium = compare(held_out(cfg.family, MEDIUM, args.held_out), cluster, params, policies=policies)
    tiny = compare(held_out(cfg.family, TINY, args.tiny), cluster, params, policies=policies, optimum=True)
    zoo = []
    if not args.no_zoo:
        files = [ROOT / "data" / "graphs" / f"{name}.json" for name in ZOO]
        zoo = compare([load_graph(f) for f in files if f.exists()], cluster, params, policies=policies)
    s_medium, s_tiny = summarize(medium), summarize(tiny, reference="optimum")
    s_tiny_classical = summarize(tiny)
    out = {
        "config": cfg.to_dict(),
        "training": {"trained_here": trained_here, "seconds": round(model.seconds, 1),
                     "cpu_seconds": round(model.cpu_seconds, 1), "same_weights_as_shipped": same_as_shipped,
                     "episodes": cfg.episodes,
                     "sim_calls": model.sim_calls, "threads": cfg.threads,
                     "ratio_first_5pct": _mean_head(model.history["ratio"], 0.05),
                     "ratio_last_5pct": _mean_tail(model.history["ratio"], 0.05)},
        "held_out": {"sizes": list(MEDIUM), "graphs": len(medium), "summary": s_medium, "rows": medium},
        "tiny": {"sizes": list(TINY), "graphs": len(tiny), "summary_vs_optimum": s_tiny,
                 "summary_vs_best_classical": s_tiny_classical, "rows": tiny},
        "zoo": {"summary": summarize(zoo), "rows": zoo} if zoo else None,
        "evaluation_seconds": round(time.perf_counter() - t0, 1),
        "targets": {
            "policy_vs_best_classical": {"target": 1.05, "greedy": s_medium["placeto"]["ratio"],
                                         "best_of_n": s_medium[f"placeto-best-of-{args.samples + 1}"]["ratio"]},
            "policy_vs_optimum": {"target": 1.10, "greedy": s_tiny["placeto"]["ratio"],
                                  "best_of_n": s_tiny[f"placeto-best-of-{args.samples + 1}"]["ratio"]},
            "training_minutes": {"target": 5.0, "wall": round(model.seconds / 60, 2),
                                 "cpu": round(model.cpu_seconds / 60, 2)},
        },
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
                    "load_average": os.getloadavg()[0]},
    }
    write_json_atomic(args.out, out)
    print(f"training: {cfg.episodes} episodes, {model.seconds:.0f} s wall, {model.cpu_seconds:.0f} s CPU, "
          f"{model.sim_calls} simulator calls; same weights as {Path(args.shipped).name}: {same_as_shipped}")
    for title, summary in (("held-out 16-24 nodes, run time / best classical", s_medium),
                           ("held-out 7-9 nodes, run time / optimum", s_tiny),
                           ("zoo graphs, run time / best classical", out["zoo"]["summary"] if zoo else {})):
        if not summary:
            continue
        print(f"\n{title}\n| method | geo-mean ratio | worst | within 5 % | sim calls / graph | seconds / graph |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, s in sorted(summary.items(), key=lambda kv: kv[1]["ratio"]):
            print(f"| {name} | {s['ratio']:.3f} | {s['worst']:.3f} | {s['within_5pct']:.0%} | "
                  f"{s['sim_calls']:.0f} | {s['seconds']:.3f} |")
    print(f"\nwrote {args.out}")
    return 0


def _mean_head(xs: list[float], frac: float) -> float:
    k = max(1, int(len(xs) * frac))
    return round(sum(xs[:k]) / k, 4)


def _mean_tail(xs: list[float], frac: float) -> float:
    k = max(1, int(len(xs) * frac))
    return round(sum(xs[-k:]) / k, 4)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
