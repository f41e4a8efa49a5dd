"""Piper's planner against Piper's own program, side by side, on Piper's inputs.

For each instance (BERT-32, BERT-48/64/96 grown as Piper's experiments grow them, GNMT, ResNet;
devices, micro-batches, memory per device; bandwidth 25 GiB/s as in its experiments) this runs

* Piper's program: its ``algo.cpp`` (msr-fiddle/piper, cloned at `COMMIT` into a temporary
  folder, never into the project) with `piper_driver.cpp`, built with ``g++ -O3``; one planning
  call, CPU seconds by its own ``clock()``;
* ours, in this process: ``exact`` (exact knapsack) and ``piper`` (Piper's greedy knapsack rule),
  CPU seconds by ``time.process_time`` around `devplace_lite.solve.parallelize` on the
  model already read (numba's compiled code is loaded once by a warm-up call before any timing,
  as Piper's binary is compiled before its run: that load is reported on its own line);

and records both times per sample (``null`` where no plan fits), their relative difference and
the CPU-time ratio, with the load average. Never asserts on time. Writes results.json after
every row and the table in README.md.

    python -m benchmarks.parallelize.run [--piper-git URL_OR_PATH] [--piper-bin BIN] [--only NAMES]
                                         [--slow] [--timeout S] [--sweep] [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devplace_course.reference import PIPER_COMMIT, PIPER_NAME, PIPER_URL, piper_dir

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
INPUTS = (piper_dir() or ROOT.parent / "shared" / "reference" / PIPER_NAME) / "inputs"
URL, COMMIT = PIPER_URL, PIPER_COMMIT
GIB = float(1 << 30)
BANDWIDTH = 25.0 * GIB
FILES = {"bert": "bert32a100.json", "gnmt": "gnmt.json", "resnet": "resnet.json"}

# (name, file key, transformers, devices, micro-batches, GB per device)
CASES = [
    ("bert32", "bert", 32, 8, 1920, 8.0),
    ("bert32", "bert", 32, 64, 1920, 8.0),
    ("bert32", "bert", 32, 128, 960, 2.0),
    ("bert32", "bert", 32, 512, 512, 1.0),
    ("bert32", "bert", 32, 512, 1920, 8.0),
    ("bert32", "bert", 32, 2048, 2048, 8.0),
    ("bert32", "bert", 32, 1024, 7680, 0.3),
    ("bert64", "bert", 64, 512, 1920, 8.0),
    ("bert96", "bert", 96, 256, 512, 8.0),
    ("resnet", "resnet", 0, 16, 7680, 2.0),
    ("resnet", "resnet", 0, 64, 7680, 1.0),
    ("resnet", "resnet", 0, 128, 7680, 4.0),
    ("resnet", "resnet", 0, 16, 7680, 4.0),
    ("resnet", "resnet", 0, 64, 7680, 2.0),
    ("resnet", "resnet", 0, 128, 7680, 8.0),
    ("gnmt", "gnmt", 0, 16, 256, 0.3),
    ("gnmt", "gnmt", 0, 32, 256, 0.8),
]
# Piper needs minutes for these (the issue measured 117 s and 579 s): only with --slow
SLOW = [
    ("bert64", "bert", 64, 2048, 2048, 8.0),
    ("gnmt", "gnmt", 0, 8, 256, 1.2),
    ("gnmt", "gnmt", 0, 64, 256, 0.3),
]
# Piper's own GNMT experiments (algo.cpp, runGNMT: devices, GiB; N = the file's 256): ours only,
# Piper needs from minutes to past half an hour on each (--gnmt, into gnmt.json)
GNMT_PAPER = [(2, 2.5), (2, 3.5), (4, 1.2), (4, 2.5), (8, 0.6), (8, 1.2), (8, 2.4), (16, 0.3), (16, 0.6),
              (16, 1.2), (32, 0.3), (32, 0.8), (64, 0.3)]
# what the extra dimensions buy (the paper's bar charts): BERT-32, N = 1920, 25 GiB/s
BASELINE_KS = (8, 32, 64, 128, 512, 1024, 2048)
BASELINE_GIB = (2.0, 8.0)
METHODS = ("exact", "pipeline", "data", "equal")
# the paper's scalability sweep, ours only
SWEEP = [(f"bert{n}", "bert", n, k, bs, 8.0) for n in (32, 48, 64, 96) for bs in (512, 2048)
         for k in (8, 64, 512, 2048)]


def build_piper(git: str, workdir: Path) -> Path:
    """Clone Piper at COMMIT into ``workdir`` and compile the driver there; the binary's path."""
    src = workdir / "piper"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", git, str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "checkout", "--quiet", "--detach", COMMIT], check=True)
    shutil.copy(HERE / "piper_driver.cpp", src / "piper_driver.cpp")
    out = src / "piper_driver"
    subprocess.run(["g++", "-O3", "-o", str(out), "piper_driver.cpp"], cwd=src, check=True,
                   stderr=subprocess.DEVNULL)
    return out


def run_piper(binary: Path, key: str, transformers: int, k: int, n: int, gb: float, timeout: float) -> dict:
    cmd = [str(binary), str(INPUTS / FILES[key]), str(transformers), str(k), repr(gb * GIB), str(n), repr(BANDWIDTH)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"piper_status": f"timeout after {timeout:g} s wall", "piper_tps": None, "piper_cpu": None}
    tps, cpu, stages = p.stdout.split()
    return {"piper_status": "ok", "piper_tps": None if float(tps) < 0 else float(tps), "piper_cpu": float(cpu),
            "piper_stages": int(stages)}


def load_model(key: str, transformers: int, binary: Path | None, tmp: Path):
    """The model both planners read. BERT-48/64/96: as Piper's own code grows it (dumped by the
    driver), since which layer its C++ hash set offers first decides where copies go and the
    transformer layers' times differ slightly; `repeat_layer` grows it by the same rule up to
    that order (``--piper-bin`` absent: ours only)."""
    from devplace_lite.multidim.model import read_model, repeat_layer

    if transformers <= 32:
        return read_model(INPUTS / FILES[key])
    if binary is None:
        return repeat_layer(read_model(INPUTS / FILES[key]), transformers)
    dump = tmp / f"{key}{transformers}.json"
    subprocess.run([str(binary), str(INPUTS / FILES[key]), str(transformers), "1", "1", "1", "1", str(dump)],
                   check=True, capture_output=True)
    return read_model(dump)


def run_ours(model, k: int, n: int, gb: float, method: str, label: str, detail: bool = False) -> dict:
    from devplace_lite.solve import parallelize

    t0 = time.process_time()
    r = parallelize(model, devices=k, microbatches=n, memory=gb * GIB, bandwidth=BANDWIDTH, method=method)
    cpu = time.process_time() - t0
    out = {f"{label}_status": r.status, f"{label}_tps": r.objective, f"{label}_cpu": round(cpu, 4),
           f"{label}_stages": len(r.stages), f"{label}_rounds": r.stats.get("rounds")}
    if detail:
        out.update(pairs=r.stats.get("pairs"), knapsacks=r.stats.get("stage_curves"),
                   reason=r.reason if r.objective is None else None)
    return out


def rel(a, b):
    if a is None or b is None:
        return None if a is None and b is None else float("inf")
    return abs(a - b) / max(abs(b), 1e-300)


def render(rows: list[dict], meta: dict) -> str:
    lines = ["# Piper's planner: ours against Piper's program", "",
             f"Machine: {meta['machine']}; ours {meta['ours']}; bandwidth 25 GiB/s; memory in GiB.",
             f"Command: `{meta['command']}`; numba load before timing: {meta.get('warmup_cpu', 0):.2f} s CPU "
             "(once per process, not counted below).", "",
             "CPU seconds of one planning call, both measured in the same run (Piper: its own `clock()`; "
             "ours: `time.process_time()`); `exact` is our exact knapsack, `greedy` our DP with Piper's "
             "greedy knapsack rule; rel. diff. against Piper's time per sample (`null` where no plan fits).", "",
             "| model | k | N | GiB | Piper TPS | ours exact TPS | rel. diff. exact | rel. diff. greedy | "
             "Piper CPU s | ours exact CPU s | ratio | load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(x, fmt="{:.6g}"):
        return "null" if x is None else (fmt.format(x) if isinstance(x, float) else str(x))

    for r in rows:
        if r.get("section") != "compare":
            continue
        ratio = (r["exact_cpu"] / r["piper_cpu"]) if r.get("piper_cpu") else None
        lines.append(f"| {r['model']} | {r['devices']} | {r['microbatches']} | {r['gib']:g} | "
                     f"{f(r.get('piper_tps')) if r['piper_status'] == 'ok' else r['piper_status']} | "
                     f"{f(r['exact_tps'])} | {f(r.get('rel_exact'), '{:.1e}')} | {f(r.get('rel_greedy'), '{:.1e}')} | "
                     f"{f(r.get('piper_cpu'), '{:.3f}')}{' *' if r.get('piper_run') else ''} | {r['exact_cpu']:.3f} | "
                     f"{f(ratio, '{:.3f}')} | {r['load']} |")
    earlier = sorted({r["piper_run"] for r in rows if r.get("section") == "compare" and r.get("piper_run")})
    if earlier:
        lines += ["", "\\* Piper's figures from an earlier run on this machine (Piper needs 6 to past 30 minutes "
                  "there), not re-measured: " + "; ".join(earlier) + ". Ours re-measured in this run."]
    done = {(r["model"], r["devices"], r["microbatches"], r["gib"]) for r in rows if r.get("section") == "compare"}
    missing = [c for c in CASES + SLOW if (c[0], c[3], c[4], c[5]) not in done]
    if missing:
        lines += ["", "Not in this run (Piper or ours needs minutes there; `--slow` / `--only-slow --append` "
                  "adds them): " + ", ".join(f"{c[0]} k={c[3]} N={c[4]} {c[5]:g} GiB" for c in missing) + "."]
    if (HERE / "baselines.json").exists():
        base = json.loads((HERE / "baselines.json").read_text())["rows"]
        lines += ["", "## What the extra dimensions buy (BERT-32, N = 1920)", "",
                  "Time per sample of the exact plan and of each baseline, and the baseline's time over the "
                  "exact one (`null`: no plan fits). Command: `python -m benchmarks.parallelize.run --baselines`; "
                  "figure: baselines.png.", "",
                  "| GiB | k | exact | pipeline only | data only | equal stages (2BW-style) | load |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in base:
            cells = []
            for m in METHODS[1:]:
                v = r[f"{m}_tps"]
                cells.append("null" if v is None else f"{v:.4g} ({v / r['exact_tps']:.2f}x)")
            lines.append(f"| {r['gib']:g} | {r['devices']} | {f(r['exact_tps'], '{:.4g}')} | " + " | ".join(cells)
                         + f" | {r['load']} |")
    gnmt = [r for r in rows if r.get("section") == "gnmt"]
    if gnmt:
        lines += ["", "## GNMT over Piper's own experiments (ours only, exact)", "",
                  "Piper's `runGNMT` instances (N = 256, 25 GiB/s). Command: `python -m benchmarks.parallelize.run "
                  "--gnmt`; CPU seconds of one planning call; `null`: no plan fits (the reason given).", "",
                  "| k | GiB | TPS | status | CPU s | pairs of ideals | knapsacks solved | load |",
                  "|---:|---:|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {r['devices']} | {r['gib']:g} | {f(r['exact_tps'])} | {r['exact_status']} | "
                  f"{r['exact_cpu']:.3f} | {r.get('pairs')} | {r.get('knapsacks')} | {r['load']} |" for r in gnmt]
        lines += [""] + [f"- k = {r['devices']}, {r['gib']:g} GiB: {r['reason']}" for r in gnmt if r.get("reason")]
    sweep = [r for r in rows if r.get("section") == "sweep"]
    if sweep:
        lines += ["", "## The paper's scalability sweep (ours only, exact)", "",
                  "| model | k | N | TPS | CPU s | load |", "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['model']} | {r['devices']} | {r['microbatches']} | {f(r['exact_tps'])} | "
                  f"{r['exact_cpu']:.3f} | {r['load']} |" for r in sweep]
    return "\n".join(lines) + "\n"


def run_baselines() -> int:
    """Time per sample of the exact plan and of each baseline against devices (BERT-32)."""
    from devplace_lite.io import write_json_atomic
    from devplace_lite.solve import parallelize

    model = load_model("bert", 32, None, HERE)
    rows = []
    for gb in BASELINE_GIB:
        for k in BASELINE_KS:
            row = {"section": "baselines", "model": "bert32", "devices": k, "microbatches": 1920, "gib": gb}
            for m in METHODS:
                t0 = time.process_time()
                r = parallelize(model, devices=k, microbatches=1920, memory=gb * GIB, bandwidth=BANDWIDTH, method=m)
                row[f"{m}_tps"], row[f"{m}_cpu"] = r.objective, round(time.process_time() - t0, 3)
            row["load"] = round(os.getloadavg()[0], 1)
            print(row, flush=True)
            rows.append(row)
            write_json_atomic(HERE / "baselines.json", {"rows": rows})
    plot_baselines(rows)
    return 0


def plot_baselines(rows: list[dict]) -> None:
    """baselines.png: time per sample against devices, one panel per memory size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = dict(zip(METHODS, ("C0", "C1", "C2", "C3")))
    fig, axes = plt.subplots(1, len(BASELINE_GIB), figsize=(10, 3.8), sharey=True)
    for ax, gb in zip(axes, BASELINE_GIB):
        sub = [r for r in rows if r["gib"] == gb]
        for m in METHODS:
            pts = [(r["devices"], r[f"{m}_tps"]) for r in sub if r[f"{m}_tps"] is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=colours[m], label=m)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("devices k")
        ax.set_title(f"BERT-32, {gb:g} GiB per device, N = 1920")
        ax.legend(title="no plan fits: not drawn", fontsize=8, title_fontsize=8)
    axes[0].set_ylabel("time per sample (s)")
    fig.tight_layout()
    fig.savefig(HERE / "baselines.png", dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--piper-git", default=URL, help="where to clone Piper from (URL or local git folder)")
    ap.add_argument("--piper-bin", help="an already built piper_driver (skips the build)")
    ap.add_argument("--only", help="comma-separated model names (bert32, bert64, bert96, gnmt, resnet)")
    ap.add_argument("--slow", action="store_true", help="also the instances where Piper needs minutes")
    ap.add_argument("--only-slow", action="store_true", help="only those")
    ap.add_argument("--sweep", action="store_true",
                    help="only the scalability sweep (ours only), into sweep.json beside results.json")
    ap.add_argument("--gnmt", action="store_true",
                    help="only Piper's GNMT experiments (ours only), into gnmt.json beside results.json")
    ap.add_argument("--baselines", action="store_true",
                    help="only the baselines against the exact plan (BERT-32), into baselines.json and baselines.png")
    ap.add_argument("--timeout", type=float, default=1800.0, help="wall seconds per Piper run")
    ap.add_argument("--append", action="store_true", help="keep the rows already in results.json")
    ap.add_argument("--render", action="store_true", help="README.md from results.json only")
    a = ap.parse_args(argv)
    from devplace_lite.io import write_json_atomic

    out = HERE / ("sweep.json" if a.sweep else "gnmt.json" if a.gnmt else "results.json")

    def write_readme() -> None:
        d = json.loads((HERE / "results.json").read_text())
        rows = d["rows"] + [r for name in ("gnmt.json", "sweep.json") if (HERE / name).exists()
                            for r in json.loads((HERE / name).read_text())["rows"]]
        (HERE / "README.md").write_text(render(rows, d["meta"]))

    if a.render:
        write_readme()
        if (HERE / "baselines.json").exists():
            plot_baselines(json.loads((HERE / "baselines.json").read_text())["rows"])
        return 0
    if a.baselines:
        return run_baselines()
    from devplace_lite.solve import parallelize
    from devplace_lite.multidim.generate import random_model

    t0 = time.process_time()
    parallelize(random_model(0, layers=3), method="exact")
    parallelize(random_model(0, layers=3), method="piper")
    warm = time.process_time() - t0
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} "
                       f"{platform.python_version()}", "ours": "numba-compiled kernels, one thread",
            "command": "python -m benchmarks.parallelize.run " + " ".join(argv if argv is not None else sys.argv[1:]),
            "warmup_cpu": warm, "piper_commit": COMMIT}
    rows: list[dict] = json.loads(out.read_text())["rows"] if a.append and out.exists() else []
    if a.append and rows:
        meta["command"] = json.loads(out.read_text())["meta"]["command"] + "; then " + meta["command"]
    cases = CASES + (SLOW if a.slow else [])
    if a.only_slow:
        cases = SLOW
    if a.only:
        keep = set(a.only.split(","))
        cases = [c for c in cases if c[0] in keep]
    models: dict = {}
    if a.sweep or a.gnmt:
        cases = []
    with tempfile.TemporaryDirectory() as tmp:
        binary = (None if a.sweep or a.gnmt else Path(a.piper_bin) if a.piper_bin
                  else build_piper(a.piper_git, Path(tmp)))
        for name, key, tr, k, n, gb in cases:
            if (key, tr) not in models:
                models[(key, tr)] = load_model(key, tr, binary, Path(tmp))
            model = models[(key, tr)]
            row = {"section": "compare", "model": name, "devices": k, "microbatches": n, "gib": gb}
            row.update(run_ours(model, k, n, gb, "exact", "exact"))
            row.update(run_ours(model, k, n, gb, "piper", "greedy"))
            row.update(run_piper(binary, key, tr, k, n, gb, a.timeout))
            if row["piper_status"] == "ok":
                row["rel_exact"] = rel(row["exact_tps"], row["piper_tps"])
                row["rel_greedy"] = rel(row["greedy_tps"], row["piper_tps"])
            row["load"] = round(os.getloadavg()[0], 1)
            print(row, flush=True)
            rows.append(row)
            write_json_atomic(out, {"meta": meta, "rows": rows})
    if a.gnmt:
        model = load_model("gnmt", 0, None, HERE)
        for k, gb in GNMT_PAPER:
            row = {"section": "gnmt", "model": "gnmt", "devices": k, "microbatches": model.microbatches, "gib": gb}
            row.update(run_ours(model, k, model.microbatches, gb, "exact", "exact", detail=True))
            row["load"] = round(os.getloadavg()[0], 1)
            print(row, flush=True)
            rows.append(row)
            write_json_atomic(out, {"meta": meta, "rows": rows})
    if a.sweep:
        for name, key, tr, k, n, gb in SWEEP:
            if (key, tr) not in models:
                models[(key, tr)] = load_model(key, tr, None, HERE)
            model = models[(key, tr)]
            row = {"section": "sweep", "model": name, "devices": k, "microbatches": n, "gib": gb}
            row.update(run_ours(model, k, n, gb, "exact", "exact"))
            row["load"] = round(os.getloadavg()[0], 1)
            print(row, flush=True)
            rows.append(row)
            write_json_atomic(out, {"meta": meta, "rows": rows})
    if (HERE / "results.json").exists():
        write_readme()
    return 0


if __name__ == "__main__":
    sys.exit(main())
