"""Run a `PipelinePlan` under ``torchrun`` here: one process per rank, on one machine or several.

Problem
-------
A plan (`devplace_lite.pipeline.planner`) names the module FQNs where stages begin. Run those
stages with PyTorch's own engine the way a practitioner launches a job: ``torchrun`` starts one
process per rank on every node, they meet through the rendezvous, and each runs its stages of
the plan (`devplace_lite.pipeline.rank.main`, called by the ``run_pipeline.py`` that
`devplace_lite.pipeline.script` writes beside ``plan.json``). A stuck or failed rank must end
the run in bounded time with one line saying why, not leave processes behind.

How
---
`launch` writes the torchrun command of each node (`torchrun_commands`: ``nodes=2`` runs two
torchrun "nodes" on loopback, ``--nnodes 2 --node-rank 0/1 --rdzv-endpoint 127.0.0.1:PORT``,
the multi-machine path on one machine), runs them within a timeout in their own process
groups (`run_ranks`; a failing rank's last message becomes one `GraphError` line, with the way
out where one is known), and gathers what the ranks wrote
(`devplace_lite.pipeline.run_figures`: per-stage CPU times, the replay, memory, the check).

Exactness: torch's own engine on the plan's split; the check (``check=True``,
`devplace_lite.pipeline.check`) compares outputs and gradients with the unsplit model's.
Complexity: a process start (importing torch) and one export per rank, then the steps.

Reference: ``torchrun`` (``torch.distributed.run``) and ``torch.distributed.pipelining``,
torch 2.13.

Example
-------
See ``tests/test_plan.py``::

    p = plan(model, inputs, k=4, microbatches=4)
    paths = p.write("out/")
    run = launch(paths["plan"], nodes=2, check=True)
    run["check"]["outputs_allclose"], run["stage_forward_cpu_ms"]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import GraphError, UsageError, rank_error, read_logs
from .rank import WARMUP
from .resources import check_resources, free_port
from .run_figures import _gather


def torchrun_commands(script: str | Path, stages: int, *, nodes: int = 1, port: int | None = None,
                      extra: Sequence[str] = ()) -> list[list[str]]:
    """The torchrun command of each node (loopback rendezvous on ``port``)."""
    if nodes < 1 or stages % nodes:
        raise UsageError(f"{stages} stages do not split evenly over {nodes} node(s)")
    port = port or free_port()
    return [[sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(r),
             "--nproc-per-node", str(stages // nodes), "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "0",
             str(script), *extra] for r in range(nodes)]


def launch(plan_path: str | Path, *, nodes: int = 1, steps: int = 3, warmup: int = WARMUP, check: bool = False,
           threads: int = 1, timeout: float = 300.0, device: str = "cpu") -> dict[str, Any]:
    """Run the plan's script under torchrun here and gather the ranks' figures.

    ``nodes > 1`` starts that many torchrun "nodes" on loopback (static rendezvous at
    127.0.0.1 on a free port), each with ``stages / nodes`` processes. The whole run is bounded
    by ``timeout`` seconds; a stuck or failed run is one `GraphError` line with the failing
    rank's last message.
    """
    plan_path = Path(plan_path)
    plan = json.loads(plan_path.read_text())
    script = plan_path.with_name("run_pipeline.py")
    if not script.exists():
        raise UsageError(f"no run_pipeline.py beside {plan_path}: write the plan with PipelinePlan.write")
    for name, value, low in (("steps", steps, 1), ("warmup", warmup, 0), ("threads", threads, 1), ("nodes", nodes, 1)):
        if int(value) != value or value < low:
            raise UsageError(f"{name} must be an integer >= {low}, got {value}")
    p = int(plan.get("ranks", plan["stages"]))
    if device == "cuda":
        check_resources(p, device)
    with tempfile.TemporaryDirectory(prefix="devplace-torchrun-") as out:
        extra = ["--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads), "--out", out,
                 "--device", device, "--timeout", str(max(30.0, timeout))] + (["--check"] if check else [])
        cmds = torchrun_commands(script, p, nodes=nodes, extra=extra)
        run_ranks(cmds, timeout=timeout, threads=threads, schedule=plan["schedule"])
        ranks = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(p)]
    return _gather(plan, ranks, cmds, nodes)


def run_ranks(cmds: Sequence[Sequence[str]], *, timeout: float, threads: int = 1, schedule: str | None = None) -> None:
    """Run the torchrun commands ``cmds`` (one per node) here, within ``timeout`` seconds, the
    ranks seeing this process's import path and ``threads`` threads each. A stuck or failed run
    is one `GraphError` line with the failing rank's last message (and, for a ``schedule``, the
    way out where one is known)."""
    # the ranks import what this process can (a model module on a path a notebook added)
    path = os.pathsep.join(dict.fromkeys([os.path.abspath(x or ".") for x in sys.path] +
                                         [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    logs = [tempfile.TemporaryFile() for _ in cmds]
    procs = [subprocess.Popen(list(c), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
             for c, log in zip(cmds, logs)]
    deadline = time.monotonic() + timeout
    try:
        for pr in procs:
            pr.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _stop(procs)
        raise GraphError(f"torchrun did not finish within {timeout:.0f} s (a stage stuck or a slow machine); "
                         "raise the timeout") from None
    finally:
        _stop(procs)
    texts = read_logs(logs)
    if any(pr.returncode for pr in procs):
        why = rank_error(texts)
        raise GraphError(f"torchrun failed: {_with_fix(why, schedule) if schedule else why}")


def _with_fix(why: str, schedule: str) -> str:
    """A rank's error, with the way out where one is known: torch's zero-bubble schedules run
    each stage's backward as two passes over its graph, which some splits break (T5 under
    ZB-V, `benchmarks/schedules/README.md`) where the one-pass backward of the others runs.

    >>> why = "RuntimeError: Trying to backward through the graph a second time"
    >>> _with_fix(why, "zbv").endswith("plan it under 1f1b or interleaved-1f1b)"), _with_fix(why, "1f1b") == why
    (True, True)
    """
    from ..schedules.simulate import spec

    if spec(schedule).split_backward and "backward through the graph a second time" in why:
        return f"{why} (torch's split backward fails at this split: plan it under 1f1b or interleaved-1f1b)"
    return why


def _stop(procs: list) -> None:
    for pr in procs:
        if pr.poll() is None:
            try:
                os.killpg(pr.pid, signal.SIGTERM)
                pr.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(pr.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
