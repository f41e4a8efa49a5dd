"""The seeds' headline claims against the project's recorded benchmark results.

`claims.json` (beside this file) lists one row per headline claim of each paper the book rests
on: the claim, the paper's figure, a template of our figure, the verdict (``reproduced``,
``exceeded``, ``partly reproduced``, ``not reproduced``), why, the recorded results it rests
on and the command that records them. For each row, `CHECKS` holds a function that reads the
recorded results (``benchmarks/*/results.json``, never a fresh run) and returns the values the
template names and the reasons, if any, why those results no longer support the verdict. The
appendix of the book renders the table from them; ``tests/test_reproduction.py`` fails when a
check finds a reason.

    python -m benchmarks.reproduction.claims       # print every row and whether it holds
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VERDICTS = ("exceeded", "reproduced", "partly reproduced", "not reproduced")
EPS = 1e-9


@dataclass
class Outcome:
    """What the recorded results say for one claim: the values its template names, and the
    reasons (empty when the verdict holds) they do not support it."""

    values: dict[str, Any]
    problems: list[str]


def _load(root: Path, source: str) -> Any:
    return json.loads((root / source).read_text())


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


# -- Tarnawski et al. 2020 -----------------------------------------------------------------
def t20_dp_optimal(root: Path) -> Outcome:
    rows = [r for r in _load(root, "benchmarks/dp/results.json")["rows"] if not r["name"].startswith("zoo/")]
    optimal = [r for r in rows if r["status"] == "optimal" and abs(r["objective"] - r["check"]) <= EPS * r["objective"]]
    agree = [r for r in rows if (r.get("authors") or {}).get("objective") is not None
             and abs(r["authors"]["objective"] - r["objective"]) <= 1e-9 * r["objective"]]
    unfinished = [r for r in rows if (r.get("authors") or {}).get("status") not in (None, "ok")]
    gnmt = next(r for r in rows if r["name"] == "LayerGraphs/gnmt_inference")
    incep = [r for r in rows if "inceptionv3" in r["name"]]
    v = dict(workloads=len(rows), optimal=len(optimal), agree=len(agree), unfinished=len(unfinished),
             gnmt_s=gnmt["cpu_seconds"], incep_s=max(r["cpu_seconds"] for r in incep))
    problems = []
    if len(rows) != 16 or len(optimal) != 16:
        problems.append(f"optimal on {len(optimal)} of {len(rows)} published workloads, not all 16")
    if len(agree) + len(unfinished) != len(rows):
        problems.append("an objective differs from the authors' program's on the same file")
    if not all(r["status"] == "optimal" for r in incep) or gnmt["cpu_seconds"] >= 15.0:
        problems.append("no longer beyond the authors' program: Inception-v3 unsolved or GNMT not under 15 s")
    return Outcome(v, problems)


def t20_experts(root: Path) -> Outcome:
    rows = _load(root, "benchmarks/experts/results.json")["rows"]
    s = {r["workload"]: r["speedup"] for r in rows}
    inside = sum(0.13 - 0.005 <= x - 1 <= 0.43 + 0.005 for x in s.values())
    v = dict(n=len(s), lo=min(s.values()), hi=max(s.values()), inside=inside,
             incep=s.get("inceptionv3_inference", float("nan")))
    problems = []
    if len(s) != 6 or not all(r["optimum_status"] == "optimal" and r["expert_feasible"] for r in rows):
        problems.append("not six expert splits scored against a proven optimum")
    if min(s.values()) <= 1.10 or inside < 5:
        problems.append(f"the experts are no longer 13-43 % behind on most workloads ({inside} of {len(s)} inside)")
    return Outcome(v, problems)


def t20_baselines(root: Path) -> Outcome:
    dp_rows = [r for r in _load(root, "benchmarks/dp/results.json")["rows"] if not r["name"].startswith("zoo/")]
    pd = {r["name"]: r["pipedream"] / r["objective"] for r in dp_rows}
    worst = max(pd, key=pd.get)
    ex = _load(root, "benchmarks/experts/results.json")["rows"]
    paper = ("pipedream", "kl", "local-search")
    layer_worst = max(r["baselines"][m] / r["optimum"] for r in ex for m in paper)
    beats_experts = min(r["expert"] / min(r["baselines"][m] for m in paper) for r in ex)
    v = dict(pd_worst=pd[worst], pd_worst_on=worst.split("/")[1], layer_worst=layer_worst,
             beats_experts=beats_experts)
    problems = []
    if min(pd.values()) < 1 - EPS or any(r["baselines"][m] < r["optimum"] * (1 - EPS) for r in ex for m in paper):
        problems.append("a baseline beat the DP's proven optimum over chains: a bug")
    if not 1.5 < pd[worst] < 4.5:
        problems.append(f"PipeDream's worst is {pd[worst]:.2f}x: the 'partly' (far off somewhere, never 4.5x) no longer holds")
    return Outcome(v, problems)


def t20_noncontiguous(root: Path) -> Outcome:
    ex = _load(root, "benchmarks/experts/results.json")
    better = [r for r in ex["rows"] if r["noncontiguous"]["better"]]
    for r in better:
        r["_gain"] = 1 - r["noncontiguous"]["load"] / r["optimum"]
    best = max(better, key=lambda r: r["_gain"]) if better else None
    proven = [r for r in better if r["noncontiguous"]["status"] == "optimal"]
    v = dict(better=len(better), n=len(ex["rows"]), limit=ex["ip_time_limit"],
             best_gain=100 * best["_gain"] if best else 0.0, best_on=best["workload"] if best else "-",
             proven=", ".join(f"{r['workload']} ({100 * r['_gain']:.1f} % lower)" for r in proven) or "none")
    problems = []
    if not better:
        problems.append("the IP found no split below the DP's optimum")
    if any(r["noncontiguous"]["split"] == "chain" for r in better):
        problems.append("a split below the optimum over chains is recorded as a chain: a bug")
    return Outcome(v, problems)


def t20_latency(root: Path) -> Outcome:
    lat = _load(root, "benchmarks/latency/results.json")
    recs = lat["records"]
    hi = f"ip@{lat['limits'][-1]:g}"
    ratio = {r["graph"]: r["greedy"] / r[hi]["objective"] for r in recs}
    beaten = sum(r["warm_start_beaten"] for r in (rec[hi] for rec in recs))
    best = max(ratio, key=ratio.get)
    v = dict(n=len(recs), at_or_below=sum(x >= 1 - EPS for x in ratio.values()),
             below=sum(x > 1 + 1e-6 for x in ratio.values()), best=ratio[best], best_on=best.split("/")[1],
             solver_improved=beaten, limit=lat["limits"][-1])
    problems = []
    if v["at_or_below"] != len(recs) or v["below"] < len(recs) // 2:
        problems.append("the IP's latency is not at or below the greedy's everywhere, or rarely below it")
    if beaten:
        problems.append("the solver improved on its start: the verdict 'partly' (the starts did the work) is stale")
    return Outcome(v, problems)


# -- Addanki et al. 2019 (Placeto) -----------------------------------------------------------
def p19_steps(root: Path) -> Outcome:
    rl = _load(root, "benchmarks/rl/results.json")
    methods = set(rl["held_out"]["summary"])
    v = dict(episodes=rl["training"]["episodes"], sim_calls=rl["training"]["sim_calls"],
             cpu_s=rl["training"]["cpu_seconds"])
    problems = []
    if any("rnn" in m or "seq" in m for m in methods):
        problems.append("a sequence placer is now recorded: compare the training steps and update the verdict")
    if v["cpu_s"] > 300:
        problems.append("training no longer takes under 5 minutes of CPU")
    return Outcome(v, problems)


def p19_transfer(root: Path) -> Outcome:
    rl = _load(root, "benchmarks/rl/results.json")
    held = rl["held_out"]["summary"]
    tiny = rl["tiny"]["summary_vs_optimum"]
    classical = min(held[m]["ratio"] for m in ("heft", "etf"))
    v = dict(held=rl["held_out"]["graphs"], greedy=held["placeto"]["ratio"], best9=held["placeto-best-of-9"]["ratio"],
             tiny=tiny["placeto-best-of-9"]["ratio"], random=held["random"]["ratio"], topo=held["topo-fill"]["ratio"],
             heft=classical)
    problems = []
    if not (held["placeto"]["ratio"] < held["topo-fill"]["ratio"] and held["placeto"]["ratio"] < held["single"]["ratio"]
            and held["placeto-best-of-9"]["ratio"] < 1.05 and tiny["placeto-best-of-9"]["ratio"] < 1.10):
        problems.append("the policy no longer places unseen graphs well without retraining")
    if held["placeto-best-of-9"]["ratio"] <= classical:
        problems.append("the policy now matches the list schedulers: the verdict should be 'reproduced'")
    return Outcome(v, problems)


# -- Archer et al. 2024 ----------------------------------------------------------------------
def a24_geomean(root: Path) -> Outcome:
    table = _load(root, "benchmarks/bounds/results.json")["summary"]["table"]
    v = dict(best=table["best"]["16"]["geomean"], classic=table["classic"]["16"]["geomean"],
             nodp=table["best-nodp"]["16"]["geomean"], n=table["best"]["16"]["instances"])
    problems = []
    if v["nodp"] < 0.9452:
        problems.append(f"the relaxations alone reach {v['nodp']:.4f} at k = 16, below the paper's 0.9452")
    if v["classic"] > 0.7:
        problems.append("the classic bound is no longer weak on the testbed: the comparison says little")
    return Outcome(v, problems)


# -- Tavarageri et al. 2019 ------------------------------------------------------------------
def s19_quality(root: Path) -> Outcome:
    h = _load(root, "benchmarks/heuristics/results.json")
    proven = [r for r in h["rows"] if r["reference_kind"] == "dp optimum"]
    kl = [r["methods"]["kl"]["objective"] / r["reference"] for r in proven]
    v = dict(graphs=h["summary"]["graphs"], within=h["summary"]["within_10pct"], proven=len(proven),
             worst_best=max(r["ratio_to_reference"] for r in proven), kl_geo=_geomean(kl))
    problems = []
    if v["within"] < v["graphs"] - 1 or v["worst_best"] > 1.10:
        problems.append("the best heuristic is no longer within 10 % of the optimum nearly everywhere")
    return Outcome(v, problems)


def s19_speed(root: Path) -> Outcome:
    h = _load(root, "benchmarks/heuristics/results.json")
    big = [r for r in h["rows"] if r["nodes"] >= 1000]
    slowest = max(m["seconds"] for r in big for m in r["methods"].values())
    v = dict(big=len(big), under=sum(r["all_under_1s"] for r in big), slowest=slowest)
    problems = []
    if not big or v["under"] != len(big):
        problems.append("a heuristic took a second or more on a graph of 1,000+ nodes")
    return Outcome(v, problems)


CHECKS: dict[str, Callable[[Path], Outcome]] = {
    "T20-dp-optimal": t20_dp_optimal, "T20-experts": t20_experts, "T20-baselines": t20_baselines,
    "T20-noncontiguous": t20_noncontiguous, "T20-latency": t20_latency,
    "P19-steps": p19_steps, "P19-transfer": p19_transfer,
    "A24-geomean": a24_geomean,
    "S19-quality": s19_quality, "S19-speed": s19_speed,
}


def provenance(source: str, root: Path = ROOT) -> str:
    """Machine, date and load a recorded result states (each benchmark records what it can;
    its README says the rest), e.g. ``"x86_64, 2 cores; 2026-11-23; load 1.4-2.0"``."""
    obj = _load(root, f"{source}/results.json")
    meta = obj.get("meta") or {}
    mach = obj.get("machine") or meta.get("machine") or (obj.get("summary") or {}).get("machine")
    if isinstance(mach, dict):
        mach = ", ".join(str(x) for x in (mach.get("machine"), f"{mach['cpus']} cores" if mach.get("cpus") else None,
                                          f"torch {mach['torch']}" if mach.get("torch") else None) if x)
    elif mach and obj.get("cpus"):
        mach = f"{mach}, {obj['cpus']} cores"
    date = obj.get("date") or meta.get("date")
    loads = [x for x in (obj.get("load_average_before_after") or []) if x is not None]
    loads += [r[k] for r in obj.get("rows", []) if isinstance(r, dict) for k in ("load_before", "load_after", "load")
              if isinstance(r.get(k), (int, float))]
    loads += [meta[k] for k in ("load_min", "load_max") if k in meta]
    if isinstance(obj.get("machine"), dict) and "load_average" in obj["machine"]:
        loads.append(obj["machine"]["load_average"])
    parts = [mach, date, f"load {min(loads):.1f}-{max(loads):.1f}" if loads else None]
    return "; ".join(p for p in parts if p) or "see its README"


def claims(root: Path = ROOT) -> list[dict[str, Any]]:
    """The rows of claims.json."""
    return json.loads((root / "benchmarks/reproduction/claims.json").read_text())["claims"]


def assess(root: Path = ROOT) -> list[tuple[dict[str, Any], Outcome, str]]:
    """Every claim, what the recorded results say, and our figure written from them."""
    out = []
    for c in claims(root):
        o = CHECKS[c["id"]](root)
        out.append((c, o, c["ours"].format(**o.values)))
    return out


def main() -> int:
    bad = 0
    for c, o, ours in assess():
        print(f"[{'ok' if not o.problems else 'STALE'}] {c['id']}: {c['verdict']} | {ours}")
        for p in o.problems:
            print(f"    {p}")
        bad += bool(o.problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
