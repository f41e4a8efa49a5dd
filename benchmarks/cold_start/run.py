"""Whole commands from a cold start, side by side with the authors' DP program (issue 19).

For each of the authors' 16 published throughput files, two fresh processes, as a user runs them:

* ours: ``devplace partition FILE --method dp --json`` (the file's own cluster);
* theirs: their C++ DP, ``dp < FILE``, built from their public repository
  (https://github.com/msr-fiddle/dnn-partitioning, ``throughput-dp/dp.cpp``, ``g++ -O3``) into a
  temporary folder; neither their code nor their output is kept.

The runs are interleaved (ours then theirs, theirs then ours on the next round), on the same
machine, and each records its wall seconds, its CPU seconds (user + system of the child) and
the 1-minute load average just before it. Every figure is then written as a ratio to the
authors' run of the same round; the median round is reported. Both answers are compared (the
same optimum). A file on which the authors need more than `LONG` seconds runs one round.

Target (issue 19, "Done when"): where the authors' program needs more than 0.5 s ours is
faster, and elsewhere ours answers within 0.5 s. Wall time is what the target names; on a
shared machine it moves with the load, so the CPU seconds (what a quiet machine's wall time
approaches, both programs being single-threaded) are judged too.

    python -m benchmarks.cold_start.run [--authors BINARY] [--rounds 3] [--timeout 120]
    python -m benchmarks.cold_start.run --baseline DIR    # this checkout against an earlier one

``--baseline DIR`` (a checkout of an earlier commit, ``git worktree add --detach DIR REV``, with
its compiled kernels) runs the same command from both checkouts instead, interleaved, and
writes ``baseline.json`` and the README's second table: the no-regression check of a change.

Writes results.json and the table of README.md. Benchmarks measure; they never assert.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devplace_lite.io import write_json_atomic
from devplace_course.reference import reference_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = reference_dir("throughput-inputs")
REPOSITORY = "https://github.com/msr-fiddle/dnn-partitioning"
#: Seconds: the target's threshold between "answer at once" and "be faster than theirs".
BLINK = 0.5
#: Seconds of the authors' first round past which a file runs one round only.
LONG = 10.0
#: Their program's address-space cap (bytes): on Inception-v3 it grows past 10 GB.
AUTHORS_MEMORY = 8 * 2**30


def build_authors(source: str, folder: Path) -> Path:
    """Clone their repository (a URL or a local clone) into ``folder`` and compile the DP."""
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", source, str(folder / "repo")], check=True)
    src = folder / "repo" / "throughput-dp"
    subprocess.run(["g++", "-O3", "-o", "dp", "dp.cpp"], cwd=src, check=True)
    return src / "dp"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AUTHORS_MEMORY, AUTHORS_MEMORY))


def timed(cmd: list[str], stdin: Path | None, timeout: float, cap: bool = False, cwd: Path = ROOT) -> dict:
    """One fresh process: wall and CPU seconds, load before, status, stdout."""
    load = os.getloadavg()[0]
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    with open(stdin) if stdin else open(os.devnull) as f:
        try:
            proc = subprocess.run(cmd, stdin=f, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                                  preexec_fn=_cap_memory if cap else None)
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
            out = proc.stdout
        except subprocess.TimeoutExpired:
            status, out = "timeout", ""
    return {"wall": time.perf_counter() - t0, "cpu": _children_cpu() - cpu0, "load": load, "status": status,
            "stdout": out}


#: The command line from a given checkout: its own library, first on the path (the current folder).
FROM_CHECKOUT = [sys.executable, "-c", "import sys; from devplace_lite.cli import main; sys.exit(main())"]


def ours(path: Path, timeout: float, checkout: Path | None = None) -> dict:
    """``devplace partition FILE --method dp --json`` as installed, or from ``checkout``."""
    exe = Path(sys.executable).with_name("devplace")
    cmd = FROM_CHECKOUT if checkout is not None or not exe.exists() else [str(exe)]
    r = timed(cmd + ["partition", str(path), "--method", "dp", "--json"], None, timeout, cwd=checkout or ROOT)
    answer = json.loads(r.pop("stdout")) if r["status"] == "ok" else {}
    return {**r, "objective": answer.get("objective"), "optimal": answer.get("status") == "optimal"}


def theirs(binary: Path, path: Path, timeout: float) -> dict:
    r = timed([str(binary)], path, timeout, cap=True)
    out = r.pop("stdout")
    try:
        r["objective"] = json.JSONDecoder().raw_decode(out.lstrip())[0]["maxLoad"] if r["status"] == "ok" else None
    except (ValueError, KeyError):
        r["objective"] = None
    return r


def median_round(pairs: list[tuple[dict, dict]]) -> dict:
    """Ratios of each round, and the round of median wall ratio (its own figures)."""
    rounds = [{"ours": o, "theirs": t, "wall_ratio": o["wall"] / t["wall"], "cpu_ratio": o["cpu"] / max(t["cpu"], 1e-3)}
              for o, t in pairs]
    mid = sorted(rounds, key=lambda r: r["wall_ratio"])[len(rounds) // 2]
    return {**mid, "rounds": len(rounds), "wall_ratios": [round(r["wall_ratio"], 3) for r in rounds]}


def verdict(ours_s: float, theirs_s: float, theirs_done: bool) -> str:
    if theirs_s > BLINK or not theirs_done:
        return "faster" if ours_s < theirs_s else "SLOWER"
    return "within 0.5 s" if ours_s <= BLINK else "OVER 0.5 s"


def row(name: str, m: dict) -> dict:
    o, t = m["ours"], m["theirs"]
    done = t["status"] == "ok"
    same = done and o["objective"] is not None and abs(o["objective"] - t["objective"]) <= 1e-6 * max(1.0, abs(t["objective"]))
    return {"name": name, "rounds": m["rounds"], "wall_ratios": m["wall_ratios"],
            "ours_wall": o["wall"], "ours_cpu": o["cpu"], "ours_status": o["status"], "ours_optimal": o["optimal"],
            "theirs_wall": t["wall"], "theirs_cpu": t["cpu"], "theirs_status": t["status"],
            "wall_ratio": m["wall_ratio"], "cpu_ratio": m["cpu_ratio"], "load": max(o["load"], t["load"]),
            "objective": o["objective"], "theirs_objective": t["objective"] if done else None,
            "same_optimum": same if done else None,
            "target_wall": verdict(o["wall"], t["wall"], done), "target_cpu": verdict(o["cpu"], t["cpu"], done)}


def table(rows: list[dict]) -> str:
    def their(r: dict, key: str) -> str:
        return f"{r[key]:.2f}" if r["theirs_status"] == "ok" else f"> {r[key]:.0f} ({r['theirs_status']})"

    def ratio(r: dict, key: str) -> str:
        return f"{r[key]:.3f}" if r["theirs_status"] == "ok" else f"< {r[key]:.3f}"

    lines = ["| workload | theirs wall s | ours wall s | **wall ratio** | target (wall) | theirs CPU s | ours CPU s | "
             "**CPU ratio** | target (CPU) | load | rounds | same optimum |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    for r in rows:
        same = "-" if r["same_optimum"] is None else ("yes" if r["same_optimum"] else "NO")
        lines.append(f"| {r['name']} | {their(r, 'theirs_wall')} | {r['ours_wall']:.2f} | {ratio(r, 'wall_ratio')} | "
                     f"{r['target_wall']} | {their(r, 'theirs_cpu')} | {r['ours_cpu']:.2f} | {ratio(r, 'cpu_ratio')} | "
                     f"{r['target_cpu']} | {r['load']:.1f} | {r['rounds']} | {same} |")
    return "\n".join(lines)


def against_baseline(files: list[Path], baseline: Path, rounds: int, timeout: float) -> list[dict]:
    """This checkout and ``baseline``, the same command, interleaved: the median CPU ratio per file."""
    rows = []
    for p in files:
        pairs = []
        for rnd in range(rounds):
            first, second = (ROOT, baseline) if rnd % 2 == 0 else (baseline, ROOT)
            a, b = ours(p, timeout, first), ours(p, timeout, second)
            pairs.append((a, b) if first == ROOT else (b, a))
        cpu = sorted(n["cpu"] / max(o["cpu"], 1e-3) for n, o in pairs)
        wall = sorted(n["wall"] / max(o["wall"], 1e-3) for n, o in pairs)
        rows.append({"name": f"{p.parent.name}/{p.stem}", "rounds": rounds, "cpu_ratio": cpu[len(cpu) // 2],
                     "wall_ratio": wall[len(wall) // 2], "new_cpu": sorted(n["cpu"] for n, _ in pairs)[rounds // 2],
                     "old_cpu": sorted(o["cpu"] for _, o in pairs)[rounds // 2],
                     "same_answer": all(n["objective"] == o["objective"] for n, o in pairs),
                     "load": max(max(n["load"], o["load"]) for n, o in pairs)})
        print(f"{rows[-1]['name']}: CPU new/old {rows[-1]['cpu_ratio']:.3f}, wall {rows[-1]['wall_ratio']:.3f}", flush=True)
    return rows


def baseline_table(rows: list[dict]) -> str:
    lines = ["| workload | old CPU s | new CPU s | **CPU new / old** | wall new / old | same answer | load |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    lines += [f"| {r['name']} | {r['old_cpu']:.2f} | {r['new_cpu']:.2f} | {r['cpu_ratio']:.3f} | {r['wall_ratio']:.3f} | "
              f"{'yes' if r['same_answer'] else 'NO'} | {r['load']:.1f} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors", default=os.environ.get("DEVPLACE_AUTHORS_DP"),
                    help="their compiled DP (default: $DEVPLACE_AUTHORS_DP, else built from --source)")
    ap.add_argument("--source", default=REPOSITORY, help="their repository (URL or local clone) to build from")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (files over LONG s: one)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds either program gets per run")
    ap.add_argument("--only", help="files whose name contains this")
    ap.add_argument("--baseline", type=Path, help="a checkout of an earlier commit to run against, instead of the authors")
    args = ap.parse_args(argv)
    if REFERENCE is None:
        print("cold_start: the authors' throughput-inputs are not here; nothing to measure", file=sys.stderr)
        return
    files = [p for p in sorted(REFERENCE.glob("*/*.json")) if not args.only or args.only in str(p)]
    if args.baseline is not None:
        load = os.getloadavg()[0]
        rows = against_baseline(files, args.baseline.resolve(), args.rounds, args.timeout)
        described = subprocess.run(["git", "-C", str(args.baseline), "log", "-1", "--format=%h %s"],
                                   capture_output=True, text=True).stdout.strip()[:100]
        current = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
                                 capture_output=True, text=True).stdout.strip()[:100]
        command = "python -m benchmarks.cold_start.run " + " ".join(argv if argv is not None else sys.argv[1:])
        write_json_atomic(HERE / "baseline.json", {"date": time.strftime("%Y-%m-%d %H:%M"), "command": command,
                                                   "new": current, "old": described, "cpus": os.cpu_count(),
                                                   "load_average_before_after": [load, os.getloadavg()[0]], "rows": rows})
        readme = HERE / "README.md"
        pre, mark, authors = readme.read_text().partition("<!-- table -->")  # the authors' table stays last
        pre = pre.partition("<!-- baseline -->")[0].rstrip("\n")
        cpu = sorted(r["cpu_ratio"] for r in rows)
        section = ("<!-- baseline -->\n## Against the previous commit\n\n"
                   f"New: `{current}`; old: `{described}`. Same command from each checkout, interleaved, "
                   f"{args.rounds} rounds, median per file; `{command.strip()}`, {os.cpu_count()} cores, load "
                   f"{load:.1f} before. Median CPU ratio new / old over the files: {cpu[len(cpu) // 2]:.3f} "
                   f"(range {cpu[0]:.3f}-{cpu[-1]:.3f}).\n\n" + baseline_table(rows) + "\n\n## Against the authors\n\n")
        readme.write_text(pre + "\n\n" + section + mark + authors)
        return
    tmp = Path(tempfile.mkdtemp(prefix="devplace-authors-"))
    try:
        try:
            binary = Path(args.authors) if args.authors else build_authors(args.source, tmp)
        except (OSError, subprocess.CalledProcessError) as e:  # no network, git or g++: nothing to compare with
            print(f"cold_start: could not build the authors' DP from {args.source} ({e}); "
                  f"give a built one with --authors", file=sys.stderr)
            return
        load_before = os.getloadavg()
        pairs: dict[str, list[tuple[dict, dict]]] = {}
        for rnd in range(args.rounds):
            for p in files:
                name = f"{p.parent.name}/{p.stem}"
                if rnd and pairs[name][0][1]["wall"] > LONG:
                    continue
                if rnd % 2 == 0:
                    o = ours(p, args.timeout)
                    t = theirs(binary, p, args.timeout)
                else:
                    t = theirs(binary, p, args.timeout)
                    o = ours(p, args.timeout)
                pairs.setdefault(name, []).append((o, t))
                print(f"round {rnd + 1} {name}: ours {o['wall']:.2f} s wall {o['cpu']:.2f} s CPU, theirs "
                      f"{t['wall']:.2f} s wall {t['cpu']:.2f} s CPU ({t['status']}), load {o['load']:.1f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [row(name, median_round(ps)) for name, ps in pairs.items()]
    result = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M"),
              "command": "python -m benchmarks.cold_start.run " + " ".join(argv if argv is not None else sys.argv[1:]),
              "timeout": args.timeout, "load_average_before_after": [load_before[0], os.getloadavg()[0]],
              "rows": rows}
    write_json_atomic(HERE / "results.json", result)
    readme = HERE / "README.md"
    head = readme.read_text().split("<!-- table -->")[0] if readme.exists() else ""
    met_wall = sum(r["target_wall"] in ("faster", "within 0.5 s") for r in rows)
    met_cpu = sum(r["target_cpu"] in ("faster", "within 0.5 s") for r in rows)
    readme.write_text(
        head + "<!-- table -->\n" + table(rows) + f"\n\nTarget met on {met_wall} of {len(rows)} files by wall time, "
        f"{met_cpu} of {len(rows)} by CPU time. Load average (1 min) before and after the run: "
        f"{load_before[0]:.1f}, {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {result['date']}, "
        f"`{result['command'].strip()}`.\n")


if __name__ == "__main__":
    main()
