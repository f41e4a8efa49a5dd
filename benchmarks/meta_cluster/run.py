"""A 70B-class decoder planned for a cluster on this machine: CPU seconds of the profile and of
the plan (issue 41, item 5: under 60 s for Llama-3-70B on 1,024 H100s).

    python -m benchmarks.meta_cluster.run [--model llama3_70b] [--devices 1024] [--spec H100]
                                          [--whole] [--out results.json]

The model is built on the meta device (`devplace_lite.zoo.external`: Llama-3-70B's published
configuration, 1,024 sequences of 4,096 tokens, bfloat16, no weights). The profile is
`mesh_plan.mesh_profile` (capture, roofline pricing of every kernel, tensor-parallel groups) at
one sequence per micro-batch, as ``devplace plan devplace_lite.zoo.external:llama3_70b
--devices 1024 --spec H100`` runs it; the plan is `mesh_plan.plan_mesh` over every dp x pp x tp
shape of the devices (1F1B), without a memory cap and with 80 GB per GPU. ``--whole`` captures
the whole model instead of a cut of its repeated layers (`pipeline.repeat`), the path before it.
Times are the process's CPU time (`time.process_time`) on one torch thread: a shared machine's
load does not inflate them. Benchmarks measure; they never assert.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3_70b")
    ap.add_argument("--devices", type=int, default=1024)
    ap.add_argument("--spec", default="H100")
    ap.add_argument("--whole", action="store_true", help="capture the whole model (no cut of repeated layers)")
    ap.add_argument("--out", type=Path, default=None, help="append the record to this JSON list")
    a = ap.parse_args(argv)

    import torch

    from devplace_lite.errors import GraphError
    from devplace_lite.pipeline import mesh_plan, repeat
    from devplace_lite.zoo import external

    torch.set_num_threads(1)
    if a.whole:
        repeat.find_stack = lambda _model: None  # the path before the cut: capture every layer
    model, inputs = getattr(external, a.model)()
    batch = int(inputs[0].shape[0])
    c0 = time.process_time()
    graph, shares, tpp, cap, _ = mesh_plan.mesh_profile(model, inputs, microbatches=batch, spec=a.spec)
    rec = {"model": a.model, "devices": a.devices, "spec": a.spec, "batch": batch, "whole": a.whole,
           "segments": len(cap.names), "cut": cap.repeated is not None,
           "profile_cpu_s": round(time.process_time() - c0, 2), "plans": []}
    degrees = [t for t in tpp.degrees() if a.devices % t == 0]
    for memory in (None, 80e9):
        c0 = time.process_time()
        try:
            p = mesh_plan.plan_mesh(graph, shares, devices=a.devices, degrees=degrees, microbatches=batch,
                                    batch=batch, memory=memory, spec=a.spec)
        except GraphError as e:  # no shape fits the memory model: the answer, with its time
            rec["plans"].append({"memory": memory, "plan_cpu_s": round(time.process_time() - c0, 2),
                                 "refused": str(e)})
        else:
            rec["plans"].append({"memory": memory, "plan_cpu_s": round(time.process_time() - c0, 2),
                                 "dp": p.dp, "pp": max(p.stage_of) + 1 if p.stage_of else 1, "tp": p.tp,
                                 "status": p.mesh["status"], "step_ms": round(p.mesh["step_ms"], 3),
                                 "shapes": len(p.mesh["tried"])})
        print(json.dumps({"profile_cpu_s": rec["profile_cpu_s"], **rec["plans"][-1]}), flush=True)
    rec["load"] = [round(x, 2) for x in os.getloadavg()]
    rec["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(json.dumps(rec), flush=True)
    if a.out is not None:
        rows = json.loads(a.out.read_text()) if a.out.exists() else []
        a.out.write_text(json.dumps(rows + [rec], indent=1) + "\n")
    return rec


if __name__ == "__main__":
    main()
