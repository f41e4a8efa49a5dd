"""The human experts' splits of Tarnawski et al. (2020) against the DP optimum, the paper's
baselines and the non-contiguous integer program (`devplace_course.experts`). Writes
results.json and the table in README.md.

    python -m benchmarks.experts.run                    # IP time limit 60 s per workload
    python -m benchmarks.experts.run --ip-time-limit 10

Every max load is the evaluator's, on the split the method returned. Times are CPU seconds of
this one process (``time.process_time``, one thread); the IP's time limit is wall time, so its
CPU seconds (this process and any solver child) are recorded beside its wall seconds: on a busy
machine the same limit buys less search. The load average is recorded before and after each
workload.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

from devplace_lite import partition
from devplace_course.experts import BASELINES, compare_expert, published
from devplace_lite.files import write_text_atomic

HERE = Path(__file__).parent


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (a HiGHS solve may run in one)."""
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + child.ru_utime + child.ru_stime


def run(ip_time_limit: float) -> dict:
    rows = []
    for w in published():
        load0 = os.getloadavg()[0]
        t = time.process_time()
        cmp = compare_expert(w.graph, w.expert, name=w.name, baselines=(), ip_time_limit=None)
        dp_cpu = time.process_time() - t
        base_cpu = {}
        for m in BASELINES:  # one at a time, to time each
            t = time.process_time()
            cmp.baselines[m] = partition(cmp.graph, cmp.cluster, m)
            base_cpu[m] = time.process_time() - t
        t, cpu0 = time.time(), _cpu()
        cmp.noncontiguous = partition(cmp.graph, cmp.cluster, "ip-noncontig", time_limit=ip_time_limit)
        ip_wall, ip_cpu = time.time() - t, _cpu() - cpu0
        row = cmp.to_dict()
        row.update(dp_cpu_seconds=round(dp_cpu, 3), baseline_cpu_seconds={m: round(s, 3) for m, s in base_cpu.items()},
                   ip_wall_seconds=round(ip_wall, 1), ip_cpu_seconds=round(ip_cpu, 1), load_before=round(load0, 2),
                   load_after=round(os.getloadavg()[0], 2), graph=str(w.graph.relative_to(w.graph.parents[2])),
                   expert_file=w.expert.name)
        rows.append(row)
        print(f"{w.name}: expert {row['expert']:.4f}  dp {row['optimum']:.4f}  x{row['speedup']:.3f}  "
              f"ip {row['noncontiguous']['load']:.4f} ({row['noncontiguous']['status']})", flush=True)
    return {"machine": {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
                        "python": platform.python_version()},
            "command": "python -m benchmarks.experts.run" + (f" --ip-time-limit {ip_time_limit:g}"
                                                              if ip_time_limit != 60 else ""),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "ip_time_limit": ip_time_limit,
            "baselines": BASELINES, "rows": rows}


def table(res: dict) -> str:
    names = list(res["baselines"])
    lines = [f"Machine: {res['machine']['machine']}, {res['machine']['cpus']} cores, Python {res['machine']['python']}; "
             f"{res['date']}; one-minute load average {min(r['load_before'] for r in res['rows']):.1f} to "
             f"{max(r['load_after'] for r in res['rows']):.1f} (shared machine). Command: `{res['command']}`.", "",
             "Max loads in ms (the authors' time unit); *expert / DP* is how many times as fast the optimum's "
             "pipeline runs; each baseline column is its max load over the DP's; *IP* is the non-contiguous "
             f"integer program after at most {res['ip_time_limit']:g} s of wall time (its status and split kind, "
             "and the CPU seconds that wall time bought on the shared machine).", "",
             "| workload | nodes | expert | bottleneck | DP | DP status | **expert / DP** | "
             + " | ".join(names) + " | IP | IP / DP | IP status, split | IP CPU s |",
             "| --- | ---: | ---: | --- | ---: | --- | ---: | " + "---: | " * len(names) + "---: | ---: | --- | ---: |"]
    for r in res["rows"]:
        b, ip = r["bottleneck"], r["noncontiguous"]
        lines.append(f"| {r['workload']} | {r['nodes']} | {r['expert']:.3f} | stage {b['stage']} of {b['stages']} "
                     f"({b['device']}) | {r['optimum']:.3f} | {r['optimum_status']} | **{r['speedup']:.3f}** | "
                     + " | ".join(f"{r['baselines'][m] / r['optimum']:.3f}" for m in names)
                     + f" | {ip['load']:.3f} | {ip['load'] / r['optimum']:.3f} | {ip['status']}, {ip['split']} | "
                     + f"{r.get('ip_cpu_seconds', '-')} |")
    lines += ["", "Why each expert loses (the library's sentence, `ExpertComparison.why()`):", ""]
    lines += [f"* {r['workload']}: {r['why']}." for r in res["rows"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ip-time-limit", type=float, default=60.0)
    args = p.parse_args(argv)
    if not published():
        print("the authors' workloads are not on this machine (DEVPLACE_REFERENCE, ../shared/reference)", file=sys.stderr)
        return 2
    res = run(args.ip_time_limit)
    write_text_atomic(HERE / "results.json", json.dumps(res, indent=1) + "\n")
    readme = HERE / "README.md"
    text = readme.read_text()
    start, end = "<!-- table -->", "<!-- /table -->"
    head, rest = text.split(start)
    write_text_atomic(readme, head + start + "\n" + table(res) + "\n" + end + rest.split(end)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
