"""Published large-scale training runs beside the planner's forecast for the same configuration.

Each run of `RUNS` is a training run a paper reports: the model's published configuration,
the GPU kind and count, the data, tensor and pipeline degrees, the global batch (sequences),
the sequence length and the throughput per GPU. The model is built from its configuration on
the meta device (`devplace_lite.zoo.external.meta_lm`: no weights), captured and priced on the
GPU's roofline (`mesh_plan.mesh_profile` with ``spec``) once, then planned twice on the run's
GPUs (`mesh_plan.plan_mesh`, 1F1B, micro-batches of one sequence, mixed-precision Adam, the
GPU's memory, recomputation where memory needs it):

* **at the published degrees** (``fixed``): the forecast for that configuration;
* **free**: the planner's own choice of degrees, and its forecast.

Throughput is compared in tokens per second per GPU. Papers report model FLOP/s per GPU; each
run converts with its paper's own FLOP count (`FLOPS`): Megatron-LM's and Megatron-DeepSpeed's
``96 s l h^2 (1 + s/6h + V/16lh)`` per sequence, which counts the recomputed forward (their
runs recompute every layer), and the model FLOPs utilisation of PaLM (``6 N + 12 l h s`` per
token) for the Llama 3 paper's MFU.

The efficiency model: the roofline forecasts every kernel at the GPU's peak, which no run
reaches. One number per GPU kind, ``eta``, the geometric mean of published / forecast over the
runs marked ``calibration``, scales the forecast throughput of that kind; nothing else is
fitted. The runs marked ``held-out`` are then judged: error = eta x forecast / published - 1.

    python -m benchmarks.published_runs.run            # every run; writes results.json, README.md's table
    python -m benchmarks.published_runs.run --only megatron-1.7b

Benchmarks measure; nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
GIB = 2 ** 30
#: GPU memory of the runs (all used 80 GB parts).
MEMORY = 80 * GIB


def _gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> dict[str, Any]:
    """A GPT-3-style decoder (learned positions, pre-norm, 4h MLP) as OPT's Hugging Face class builds it."""
    return {"config": "OPTConfig", "model": "OPTForCausalLM",
            "args": dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, ffn_dim=4 * hidden,
                         vocab_size=vocab, max_position_embeddings=seq, word_embed_proj_dim=hidden,
                         pad_token_id=1, bos_token_id=2, eos_token_id=2),
            "layers": layers, "hidden": hidden, "vocab": vocab}


_MEGATRON = ("Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters Using "
             "Megatron-LM, SC 2021 (arXiv 2104.04473), Table 1")
_LLAMA3 = "Llama Team, The Llama 3 Herd of Models, 2024 (arXiv 2407.21783), Table 4"
_BLOOM = ("BigScience, BLOOM: A 176B-Parameter Open-Access Multilingual Language Model, 2022 (arXiv 2211.05100), "
          "Section 3.4; model card: 384 A100 80GB, one replica on 48 GPUs, 'about 150 TFLOPs'")

#: Models by name: their published configuration.
MODELS: dict[str, dict[str, Any]] = {
    "gpt-1.7b": _gpt(24, 2304, 24),
    "gpt-3.6b": _gpt(30, 3072, 32),
    "gpt-7.5b": _gpt(36, 4096, 32),
    "gpt-18.4b": _gpt(40, 6144, 48),
    "gpt-39.1b": _gpt(48, 8192, 64),
    "gpt-76.1b": _gpt(60, 10240, 80),
    # BLOOM's sizes on the GPT-3-style class: `tensor_parallel.find` refuses BLOOM's own attention
    # (its ALiBi products merge the batch and the heads in one reshape), whose products are the same
    "bloom-176b": _gpt(70, 14336, 112, vocab=250880),
    "llama3-405b": {"config": "LlamaConfig", "model": "LlamaForCausalLM",
                    "args": dict(hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                                 num_attention_heads=128, num_key_value_heads=8, vocab_size=128256,
                                 max_position_embeddings=8192, rope_theta=500000.0),
                    "layers": 126, "hidden": 16384, "vocab": 128256},
}

#: The runs: model, GPU, degrees, global batch in sequences, sequence length, published TFLOP/s per GPU.
RUNS: list[dict[str, Any]] = [
    {"run": "megatron-1.7b", "model": "gpt-1.7b", "gpu": "A100-80GB", "gpus": 32, "tp": 1, "pp": 1, "batch": 512,
     "seq": 2048, "tflops": 137, "flops": "megatron", "source": _MEGATRON, "role": "calibration"},
    {"run": "megatron-18.4b", "model": "gpt-18.4b", "gpu": "A100-80GB", "gpus": 256, "tp": 8, "pp": 1, "batch": 1024,
     "seq": 2048, "tflops": 135, "flops": "megatron", "source": _MEGATRON, "role": "calibration"},
    {"run": "megatron-3.6b", "model": "gpt-3.6b", "gpu": "A100-80GB", "gpus": 64, "tp": 2, "pp": 1, "batch": 512,
     "seq": 2048, "tflops": 138, "flops": "megatron", "source": _MEGATRON, "role": "held-out"},
    {"run": "megatron-7.5b", "model": "gpt-7.5b", "gpu": "A100-80GB", "gpus": 128, "tp": 4, "pp": 1, "batch": 512,
     "seq": 2048, "tflops": 142, "flops": "megatron", "source": _MEGATRON, "role": "held-out"},
    {"run": "megatron-39.1b", "model": "gpt-39.1b", "gpu": "A100-80GB", "gpus": 512, "tp": 8, "pp": 2, "batch": 1536,
     "seq": 2048, "tflops": 138, "flops": "megatron", "source": _MEGATRON, "role": "held-out"},
    {"run": "megatron-76.1b", "model": "gpt-76.1b", "gpu": "A100-80GB", "gpus": 1024, "tp": 8, "pp": 4,
     "batch": 1792, "seq": 2048, "tflops": 140, "flops": "megatron", "source": _MEGATRON, "role": "held-out"},
    {"run": "bloom-176b", "model": "bloom-176b", "gpu": "A100-80GB", "gpus": 384, "tp": 4, "pp": 12, "batch": 2048,
     "seq": 2048, "tflops": 150, "flops": "megatron", "source": _BLOOM, "role": "held-out"},
    {"run": "llama3-405b-8k", "model": "llama3-405b", "gpu": "H100", "gpus": 8192, "tp": 8, "pp": 16, "batch": 2048,
     "seq": 8192, "tflops": 430, "flops": "palm", "source": _LLAMA3, "role": "calibration"},
    {"run": "llama3-405b-16k", "model": "llama3-405b", "gpu": "H100", "gpus": 16384, "tp": 8, "pp": 16,
     "batch": 2048, "seq": 8192, "tflops": 400, "flops": "palm", "source": _LLAMA3, "role": "held-out"},
]


def flops_per_token(run: dict[str, Any], params: float) -> float:
    """The FLOPs a paper counts per token (see the module docstring).

    >>> round(flops_per_token({"flops": "megatron", "seq": 2048, "model": "gpt-1.7b"}, 0) / 1e9, 2)
    14.75
    """
    m = MODELS[run["model"]]
    s, l, h, v = run["seq"], m["layers"], m["hidden"], m["vocab"]
    if run["flops"] == "megatron":
        return 96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 6 * params + 12 * l * h * s


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _row(p: Any, run: dict[str, Any]) -> dict[str, Any]:
    tokens = p.mesh["samples_per_s"] * run["seq"] / run["gpus"]
    return {"dp": p.dp, "pp": p.ranks, "tp": p.tp, "status": p.mesh["status"], "gap": p.mesh["gap"],
            "step_s": p.mesh["step_ms"] / 1e3, "tokens_per_gpu_s": tokens,
            "recompute": sum(bool(r) for r in (p.recompute or []))}


def measure(names: list[str] | None = None, free_seconds: float | None = None) -> dict[str, Any]:
    """Plan every run (or those named) and fit and judge the efficiency model; the free plan's
    search stops after ``free_seconds`` of wall time (its status says so)."""
    import torch

    from devplace_lite.errors import GraphError
    from devplace_lite.pipeline.mesh_plan import mesh_profile, plan_mesh
    from devplace_lite.zoo.external import meta_lm

    torch.set_num_threads(1)
    runs = [r for r in RUNS if names is None or r["run"] in names]
    out = []
    for name in dict.fromkeys(r["model"] for r in runs):
        m = MODELS[name]
        group = [r for r in runs if r["model"] == name]
        batch, seq, gpu = group[0]["batch"], group[0]["seq"], group[0]["gpu"]
        c0 = _cpu()
        model, inputs = meta_lm(m["config"], m["model"], batch, seq, **m["args"])
        params = float(sum(q.numel() for q in model.parameters()))
        graph, shares, tpp, _cap, _ = mesh_profile(model, inputs, microbatches=batch, spec=gpu)
        profile_cpu = _cpu() - c0
        for run in group:
            assert (run["batch"], run["seq"], run["gpu"]) == (batch, seq, gpu), "one profile per model"
            dp = run["gpus"] // (run["tp"] * run["pp"])
            common = dict(devices=run["gpus"], microbatches=batch, batch=batch, schedules=["1f1b"], memory=MEMORY,
                          optimizer="mixed-adam", spec=gpu)
            c1 = _cpu()
            # the published configuration ran, so it fits: it is forecast without the memory cap,
            # which the cost model's memory (a stage's activations whole under tensor parallelism)
            # may refuse (`fits` says whether, from the replay's peaks: the last rank's step bytes too)
            # the runs whose paper counts FLOPs with Megatron-LM's formula recomputed every layer, as the
            # formula says: their configuration recomputes on every stage
            fixed = plan_mesh(graph, shares, degrees=[run["tp"]], fixed={"dp": dp, "pp": run["pp"], "tp": run["tp"]},
                              recompute="all" if run["flops"] == "megatron" else "auto", **{**common, "memory": None})
            fits = max(fixed.simulation().rank_peak_bytes) <= MEMORY
            c2 = _cpu()
            try:
                free = plan_mesh(graph, shares, degrees=[t for t in tpp.degrees() if run["gpus"] % t == 0],
                                 time_limit=free_seconds, **common)
            except GraphError as e:  # no shape fits the memory under the cost model
                free, why = None, str(e)
            c3 = _cpu()
            published = run["tflops"] * 1e12 / flops_per_token(run, params)
            out.append({**{k: v for k, v in run.items()}, "dp": dp, "params": params,
                        "published_tokens_per_gpu_s": published, "fixed": _row(fixed, run), "fits_memory_model": fits,
                        "free": _row(free, run) if free is not None else {"status": "none fits", "why": why},
                        "cpu_s": {"profile": profile_cpu if run is group[0] else 0.0, "fixed": c2 - c1,
                                  "free": c3 - c2},
                        "shapes_tried": len(free.mesh["tried"])})
            print(f"{run['run']}: published {published:.0f} tok/s/GPU, forecast at peak "
                  f"{out[-1]['fixed']['tokens_per_gpu_s']:.0f}; cpu {profile_cpu:.0f}+{c2 - c1:.0f}+{c3 - c2:.0f} s",
                  flush=True)
    return judge(out)


def judge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``eta`` per GPU kind from the calibration runs; every run's forecast and error with it.

    >>> r = judge([{"gpu": "A100", "role": "calibration", "published_tokens_per_gpu_s": 50.0,
    ...             "fixed": {"tokens_per_gpu_s": 100.0}, "free": {"tokens_per_gpu_s": 120.0}},
    ...            {"gpu": "A100", "role": "held-out", "published_tokens_per_gpu_s": 40.0,
    ...             "fixed": {"tokens_per_gpu_s": 100.0}, "free": {"tokens_per_gpu_s": 100.0}}])
    >>> r["eta"], r["runs"][1]["error"]
    ({'A100': 0.5}, 0.25)
    """
    eta = {}
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        cal = [r for r in rows if r["gpu"] == gpu and r["role"] == "calibration"]
        if cal:
            eta[gpu] = math.exp(sum(math.log(r["published_tokens_per_gpu_s"] / r["fixed"]["tokens_per_gpu_s"])
                                    for r in cal) / len(cal))
    for r in rows:
        e = eta.get(r["gpu"])
        r["forecast_tokens_per_gpu_s"] = None if e is None else e * r["fixed"]["tokens_per_gpu_s"]
        free = r["free"].get("tokens_per_gpu_s")
        r["free_forecast_tokens_per_gpu_s"] = None if e is None or free is None else e * free
        r["error"] = None if e is None else r["forecast_tokens_per_gpu_s"] / r["published_tokens_per_gpu_s"] - 1
        r["peak_error"] = r["fixed"]["tokens_per_gpu_s"] / r["published_tokens_per_gpu_s"] - 1
    held = [abs(r["error"]) for r in rows if r["role"] == "held-out" and r["error"] is not None]
    return {"eta": eta, "runs": rows, "held_out_max_abs_error": max(held) if held else None,
            "held_out_within_25": sum(h <= 0.25 for h in held), "held_out": len(held)}


def table(res: dict[str, Any]) -> str:
    """The README's table (markdown)."""
    lines = ["| run | role | GPUs | published dp x pp x tp | published tok/s/GPU | forecast (eta x roofline) | "
             "error | roofline at peak | fits the memory model | plan's own dp x pp x tp (80 GB) | its forecast |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        f, fr = r["fixed"], r["free"]
        fc = r["forecast_tokens_per_gpu_s"]
        lines.append(f"| {r['run']} | {r['role']} | {r['gpus']} {r['gpu']} | {r['dp']} x {r['pp']} x {r['tp']} | "
                     f"{r['published_tokens_per_gpu_s']:.0f} | {_num(fc)} | {_pct(r['error'])} | "
                     f"{f['tokens_per_gpu_s']:.0f} | {'yes' if r['fits_memory_model'] else 'no'} | {_mesh(fr)} | {_num(r['free_forecast_tokens_per_gpu_s'])} |")
    return "\n".join(lines)


def _mesh(row: dict[str, Any]) -> str:
    return f"{row['dp']} x {row['pp']} x {row['tp']} ({row['status']})" if "dp" in row else row["status"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="run names (default: all)")
    ap.add_argument("--free-seconds", type=float, default=None,
                    help="wall seconds for each free plan's search over mesh shapes (default: no limit)")
    args = ap.parse_args(argv)
    t0 = time.time()
    res = measure(args.only, args.free_seconds)
    res["cpu_s"], res["wall_s"] = _cpu(), time.time() - t0
    (HERE / "results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    readme = HERE / "README.md"
    text = readme.read_text() if readme.exists() else ""
    start, end = "<!-- table -->", "<!-- /table -->"
    if start in text and end in text:
        text = text[:text.index(start) + len(start)] + "\n" + table(res) + "\n" + text[text.index(end):]
        readme.write_text(text)
    print(table(res))
    print(f"eta {res['eta']}; held-out within 25 %: {res['held_out_within_25']} of {res['held_out']}; "
          f"cpu {res['cpu_s']:.0f} s, wall {res['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
