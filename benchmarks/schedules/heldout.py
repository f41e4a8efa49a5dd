"""Held-out models: `devplace plan ... --run --json` as a user types it, forecast against wall clock.

Issue 27's acceptance check. The models are ones the forecast was never tuned on (none of them
is in `devplace_lite.zoo.external`, whose ten models the profile's fixes were measured on):
two torchvision networks and two Hugging Face language models, random weights from configs.
For each model and each of GPipe, 1F1B, interleaved 1F1B and ZB-V, the command

    devplace plan benchmarks.schedules.heldout:MODEL -k 2 --schedule S --microbatches 4 --batch 8 --run --json

runs in a fresh process, and its ``forecast.step_ms`` and ``forecast.rank_peak_bytes`` are set
against the run's ``run.step_ms`` (the median step, wall clock) and ``run.peak_memory`` (per
rank). Wall clock only means something on a quiet machine (each rank needs a core of its own),
so the load average before and after each command is recorded; run it with nothing else on
the machine:

    python -m benchmarks.schedules.heldout [--models ...] [--schedules ...] [--repeat N]

Writes ``heldout.json`` and ``heldout.md`` beside this file, after every command. Benchmarks measure; nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devplace_lite.zoo.external import hf_model, import_torchvision, vision_model

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zbv"]
MODELS = ["shufflenet", "regnet", "distilbert", "gpt_neo"]
TARGET_MEDIAN, TARGET_WORST = 0.15, 0.25
# What the recorded run shows, kept beside its table (measured, see the text).
_FINDINGS = """
What the runs on record show (three rounds over the sixteen cases, 21:11-21:43 UTC):

* **The same code run again three hours later (00:19-00:57 UTC, `heldout_rerun.json`) misses
  by far**: median 16.2 %, worst 48.6 %, 36 of 48 within 25 % (rounds: 13, 13 and 10 of 16),
  each case's median within 25 % on 14 of 16; memory 95 of 95 ranks within 25 %. The machine
  was in a slower phase: the same models profiled 1.1-1.7x slower than at 21:11 (GPT-Neo
  under GPipe forecast 55-60 ms then, 71-95 ms now), the host check read up to 1.82x slow
  before a command and 1.89x after, and the probe drew 0.78-2.98 ms (one command planned
  DistilBERT on one stage, which sends nothing: 95 ranks). The misses are the
  two ranks slowing each other's CPU time, which a profile taken in one process does not
  see: the forecast over the run's own CPU replay reads 0.72-2.30 (1.03-1.57 at 21:11), and
  ShuffleNet under 1F1B missed in all three rounds (33.8, 32.2 and 40.9 % under the wall
  clock) with its ranks' CPU replay at 93.6-119.4 ms against a forecast of 86-89 ms, where at
  21:11 the same replay read 70.0-71.5 ms. So on this 2-vCPU guest the acceptance check
  passes or fails with the host's phase; it asks for a quiet machine, which this is not
  at every hour.

* **Since the table before (15:37-15:58 UTC: median 9.7 %, worst 35.3 %, 45 of 48 within
  25 %)** the forecast prices a message, not a pass, and its probe takes the median of three
  launches:
  * each forward and backward (or input-gradient) pass pays the price once per neighbouring
    stage on another rank (`simulate`'s ``message_ms``): interleaved 1F1B's middle stages pay
    twice, ZB-V's passes once (its middle hand-over stays inside a rank), a two-stage split's
    passes once, as before;
  * each launch of the probe draws its own price: six launches in a row read 0.59-1.93 ms (a
    late receive costs a pair of processes about 0.15 ms or 2-4 ms, the same for the pair's
    life: `python -m benchmarks.schedules.messages --pairs 3`), and the run the plan forecasts
    is one more draw. `message_price` now takes the median of three launches (about 20 s, was
    7-9 s); three such probes in a row read 0.70, 0.98 and 1.22 ms, and the 48 here 0.70-1.88.

  Now: median error 7.9 %, worst 32.0 %, **47 of 48 within 25 %**; each case's median over
  its three commands within 15.7 % (16 of 16); 29 of the 48 forecasts under the wall clock.
  The one miss is DistilBERT under GPipe in the first round: forecast 50.8 ms, wall 74.8 ms,
  1.51x the run's own CPU replay (49.5 ms), where its other two rounds read 1.24x and 1.16x
  (errors 6.8 and 9.3 %): that launch drew a slow pair. Median error per schedule: GPipe
  8.7 %, 1F1B 9.4 %, interleaved 1F1B 13.1 %, ZB-V 2.2 %; per model: ShuffleNet 5.6 %, RegNet
  7.6 %, DistilBERT 9.6 %, GPT-Neo 4.2 % (all 12 of 12 within 25 % but DistilBERT, 11 of 12).
  Memory: 96 of 96 ranks within 25 %, median 2.0 %, worst 16.9 %. Three rounds in between
  (20:46-21:07 UTC), with the price per message and a one-launch probe: median 6.4 %, 44 of
  48 within 25 %, all four misses in the first round, where the probe drew 2.62 ms once
  (DistilBERT under interleaved 1F1B, 27.2 % over) and the host check read 1.86x slow after
  one command (GPT-Neo under GPipe, 42.0 % under).

What the table before showed (three rounds, 15:37-15:58 UTC):

* **Since the table before it (12:23-12:46 UTC: median 29.1 %, worst 49.5 %, 22 of 48 within
  25 %; 46 of its 48 forecasts under the wall clock)** the forecast prices what a pass costs
  on the wall clock beyond its CPU time. `devplace plan --run` still first runs a small zoo
  model under torchrun (`message_price`), but now fits the price per forward and backward
  pass at which the replay of that run's own CPU times takes its wall-clock step
  (`run_figures.wall_price`): 0.56-2.09 ms per pass here (median 1.03), where the ranks' CPU
  time outside their passes, which it priced before, is 0.26-0.68 ms. The rest is what the
  two findings below measure: waits of receives posted after their send, and the ranks
  interfering. Now 31 of the 48 forecasts are under the wall clock and 17 over. The three
  misses are DistilBERT under GPipe (35.3 and 29.1 %) and 1F1B (27.4 %), all under the wall
  clock; its case median under GPipe is 29.1 %, the other fifteen cases' are within 25 %. By
  model, per command: RegNet median 5.8 % (12 of 12 within 25 %), GPT-Neo 7.4 % (12 of 12),
  DistilBERT 13.8 % (9 of 12), ShuffleNet 14.5 % (12 of 12). One round of the same price with a
  5-step probe (15:22 UTC) read 9.5 %, 14 of 16 within 25 %.
* **The table before that one (10:12 UTC, one round: median 41.8 %, 4 of 16 within 25 %)**:
  the forecast priced the ranks' CPU time outside their passes (0.17-0.37 ms a pass), and a
  run skipped three warm-up steps, not one: the first steps fault their buffers in (up to
  5.5x the later ones).
* **The wall clock over the run's own CPU replay** (its least CPU time per stage and action
  kind, with its ranks' CPU time outside their passes) reads 1.05-1.68x, median 1.25 (the
  table before: 1.05-1.69x, median 1.28): the fitted price per pass is what the forecast adds
  for that gap, from the probe's run rather than the model's own.
* **The machine moves by itself** (measured for the table before). The same command, run
  three times minutes apart, measured wall steps up to 1.69x apart, and its own profile moved
  up to 1.57x (RegNet under GPipe forecast 240 ms once, 154 and 167 ms the other times): this
  guest's two vCPUs share a host whose speed changes in phases of a second or so, which the
  load average inside does not show. Timed alone in one process, ShuffleNet's second stage's
  forward took 20-22 ms for 25 calls in a row, then 11-12 ms; in one run, RegNet's first
  stage took 19-24 ms per forward in one step and 31-42 ms in the others. The host check
  before each command (`host before / after`: the same fixed work on both cores, against the
  best seen) does not catch phases that start during the command.
* **Memory per rank**: 96 of 96 ranks within 25 %, median 2.0 %, worst 17.2 % (ShuffleNet's
  second rank under ZB-V). A value that one segment saves as its output and the next as its
  input is one tensor inside a stage, and counted once a stage since commit e9ada29 (the
  table before: 90 of 96, ShuffleNet's first rank under GPipe and interleaved 1F1B 28-29 %).
* **On sixteen idle cores the wall clock still exceeds the replay** (measured before the
  wall price, on the CPUs of a lent H100 machine: Intel Xeon, 16 cores, Firecracker; torch 2.11.0,
  Python 3.12; `BUDGET=530 bash benchmarks/device.sh` ran this script with
  `--models distilbert gpt_neo regnet shufflenet`, 15:00-15:08 UTC, and its time ran out after
  six commands). DistilBERT under the four schedules and GPT-Neo under GPipe and 1F1B read
  28.3, 6.7, 34.7, 33.2, 31.0 and 4.0 % (2 of 6 within 25 %); memory 12 of 12 ranks within
  8 %. With a core free beside each rank the wall clock is 1.06-1.39x the run's CPU replay
  (median 1.19; 1.05-1.69 here), and forecast / replay reads 0.79-1.41: there too, profile
  and run a minute apart saw the machine at different speeds.
* **On sixteen cores with the wall price** (the same machine's CPUs, 17:30-17:39 UTC;
  `benchmarks/device.sh` ran this script as two streams at once, DistilBERT and GPT-Neo in
  one, ShuffleNet and RegNet in the other, to fit the device time: up to six busy threads on
  sixteen cores, load 3.6-5.0; 14 of 16 commands finished; `heldout_device.json`). There a
  receive posted late costs what an early one does (`messages`: post 0.10-0.14 ms, where here
  it is 0.2-4.8 ms by process pair), and DistilBERT, whose three misses here come from those
  waits, read 7.8, 8.6, 1.5 and 3.8 % under the four schedules. Over the 14 commands: median
  18.9 %, 11 of 14 within 25 % (misses: GPT-Neo under interleaved 1F1B 40.5 %, ShuffleNet
  under ZB-V 38.4 % and interleaved 1F1B 29.7 %, all under the wall clock); memory 27 of 27
  ranks within 25 %, median 2.0 %. The misses are the profile's, not the price's: the wall
  clock over the run's own CPU replay reads 1.04-1.20 (1.43 twice), forecast over replay
  0.65-1.41, and the probe's price moved from 0.34 to 2.06 ms between commands (GPT-Neo under
  1F1B was planned on one stage, which pays none: 27 ranks, not 28). The two streams
  sharing caches and memory bandwidth are not told apart from the profile and the run a
  minute apart, so this is not the quiet-machine check: that (16 commands one after
  another, about 16 minutes there) did not fit the session's 15 minutes of device time.
* **Binding each rank to a core of its own does not help** (tried, not adopted; 18:30-18:40
  UTC). In the two-process benchmark (`messages`, with each process and the gloo threads it
  starts bound to its own core) a late receive took 0.12-0.29 ms in all 15 pairs, against
  0.14-3.9 ms in 16 pairs unbound (binding only the computing thread: 0.20-3.5 ms). But a DistilBERT GPipe plan, launched ten times alternating bound and
  unbound, ran slower bound: median step 64.6 ms against 56.7 ms, price per pass 2.32 against
  1.55 ms, wall over CPU replay 1.36 against 1.22. Bound, a rank's gloo thread has only its
  rank's core, busy with the rank's own passes; unbound, it runs on whichever core is free.
  Tried again with the price per message and the three-launch probe (each rank and its
  threads bound to a core by ``LOCAL_RANK``, the probe bound the same way; one round of this
  benchmark, 23:34-23:46 UTC): the probe still drew 0.49-2.20 ms, the wall clock over the
  run's CPU replay read 1.07-1.92 (median 1.22, as unbound), and two of sixteen commands
  missed: ShuffleNet under ZB-V at 42.9 % (wall 167.8 ms, where unbound runs read 86-107 ms)
  and DistilBERT under GPipe at 25.0 %. Not adopted.
* **What a message costs beyond CPU time.** torch's schedules post a stage's receive only
  when the stage reaches the action that needs it, and gloo moves the data once both sides
  have posted. In a DistilBERT GPipe run here (`_sorted_batch_p2p` and `_wait_batch_p2p`
  timed in the ranks), rank 1 posted each later forward's receive after rank 0 had sent: the
  post blocked 2.2-2.9 ms of wall time with 0.1 ms of CPU, three times a step, and rank 0's
  first gradient arrived 2.5 ms after it was sent; two ranks computing their backward at once
  each lost about 4 ms of wall time against their CPU time. `python -m
  benchmarks.schedules.messages` reproduces the first: a 32 KiB receive posted before the send
  completes 0.1 ms after it, one posted 3 ms after it blocks 0.4-4.8 ms (median per process
  pair, five pairs; raising the gloo thread's priority or lowering the compute thread's did
  not change it). Sampled with `py-spy record --native --idle` over 300 late receives (post
  median 2.2 ms), a third of the post's samples sit in `writev` of gloo's ready notice
  (`tcp::Pair::sendAsyncMode`, the socket its own loop thread reads), the rest in torch's
  Python around it with no CPU time spent: the thread waits to run. Fitted as one wall-time
  price per receiving pass (a pass's start after its data and its rank are both ready), the
  DistilBERT GPipe runs ask 1.9-3.5 ms and three runs of the probe's ResNet 0.7-2.1 ms (its
  wall step 50-75 ms, the same command); as a transfer time on each cut a replay cannot reach
  the wall clock (a transfer delays only a receiver that waits, a late post costs one that
  did not). The forecast prices it as one price per pass fitted on the probe (above), which
  under-prices DistilBERT under GPipe: its three misses.
"""


def shufflenet(batch: int = 8, seed: int = 0):
    """torchvision ShuffleNetV2 x0.5 (channel shuffles: views and transposes between blocks), 10 classes, 64x64."""
    tv = import_torchvision()
    return vision_model(lambda: tv.models.shufflenet_v2_x0_5(num_classes=10), batch, 64, seed)


def regnet(batch: int = 8, seed: int = 0):
    """torchvision RegNetY-400MF (grouped convolutions, squeeze-excitation), 10 classes, 64x64."""
    tv = import_torchvision()
    return vision_model(lambda: tv.models.regnet_y_400mf(num_classes=10), batch, 64, seed)


def distilbert(batch: int = 8, seed: int = 0):
    """Hugging Face DistilBERT with its masked-LM head (tied): 4 layers, width 128, 32 tokens."""
    return hf_model("DistilBertConfig", "DistilBertForMaskedLM", ("input_ids",), batch, 32, seed, vocab_size=2000,
                    dim=128, n_layers=4, n_heads=4, hidden_dim=512, max_position_embeddings=64)


def gpt_neo(batch: int = 8, seed: int = 0):
    """Hugging Face GPT-Neo (local and global attention layers alternating, tied head): 4 layers, width 128."""
    return hf_model("GPTNeoConfig", "GPTNeoForCausalLM", ("input_ids",), batch, 32, seed, vocab_size=2000,
                    hidden_size=128, num_layers=4, num_heads=4, attention_types=[[["global", "local"], 2]],
                    max_position_embeddings=64, window_size=16, bos_token_id=1999, eos_token_id=1999)


def _load() -> float:
    return os.getloadavg()[0]


def _unit(_: int) -> float:
    """Least thread CPU ms of a fixed piece of Python work over half a second."""
    times, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        c = time.thread_time()
        sum(i * i for i in range(20_000))
        times.append(1e3 * (time.thread_time() - c))
    return min(times)


def host_speed() -> float:
    """The same work on both cores at once, slowest core's least ms: this machine's CPU time
    per unit of work moves with the other guests on its host (the load average inside does
    not show it), so each command is preceded by this check (`quiet`)."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        return max(pool.map(_unit, range(2)))


def quiet(best: list[float], tries: int = 4, wait: float = 5.0) -> float:
    """Wait (up to ``tries`` checks ``wait`` s apart) until `host_speed` is within 15 % of the
    best seen (``best[0]``, updated), and return the last check's ratio to the best."""
    for _ in range(tries):
        ms = host_speed()
        best[0] = min(best[0], ms)
        if ms <= 1.15 * best[0]:
            break
        time.sleep(wait)
    return ms / best[0]


def case(model: str, schedule: str, timeout: float, best: list[float]) -> dict[str, Any]:
    slow = quiet(best)
    row: dict[str, Any] = {"model": model, "schedule": schedule, "load_before": _load(), "host_slow_before": slow}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="devplace-heldout-") as tmp:  # the plan's files, not in the checkout
        argv = [sys.executable, "-c", "import sys; from devplace_lite.cli import main; sys.exit(main())", "plan",
                f"benchmarks.schedules.heldout:{model}", "-k", "2", "--schedule", schedule, "--microbatches", "4",
                "--batch", "8", "--run", "--json", "--out", str(Path(tmp) / "plan")]
        out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    row.update(seconds=time.perf_counter() - t0, load_after=_load(), exit=out.returncode,
               host_slow_after=host_speed() / best[0])
    if out.returncode != 0:
        row["error"] = (out.stderr.strip().splitlines() or ["(no message)"])[-1][:300]
        return row
    res = json.loads(out.stdout)
    fc, run = res["forecast"], res["run"]
    row.update(split=res.get("status"), stages=res.get("stages"), forecast_step_ms=fc["step_ms"],
               run_step_ms=run["step_ms"], run_cpu_replay_ms=run.get("step_cpu_replay_ms"),
               forecast_peak=fc["rank_peak_bytes"], run_peak=run["peak_memory"],
               action_ms=float(fc.get("action_ms") or 0.0), run_action_ms=run.get("action_overhead_ms"))
    row["time_error"] = abs(fc["step_ms"] - run["step_ms"]) / run["step_ms"]
    row["memory_errors"] = [abs(f - m) / m for f, m in zip(fc["rank_peak_bytes"], run["peak_memory"])]
    return row


def report(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [f"Command: `{result['command']}`; {result['machine']}; torch {result['torch']}; {result['date']}; "
             f"load average (1 min) {min(r['load_before'] for r in rows):.2f} to "
             f"{max(r.get('load_after', r['load_before']) for r in rows):.2f}.", "",
             "| model | schedule | round | forecast step ms | run step ms (wall) | error | run CPU replay ms | "
             "per message ms: priced (wall) / run CPU outside passes | peak per rank: forecast / run MiB | memory errors | load before | "
             "host before / after |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | --- |"]
    for r in sorted(rows, key=lambda r: (MODELS.index(r["model"]), SCHEDULES.index(r["schedule"]), r.get("round", 0))):
        if "error" in r:
            lines.append(f"| {r['model']} | {r['schedule']} | {r.get('round', 0) + 1} | failed: {r['error']} | | | | | | | "
                         f"{r['load_before']:.2f} | |")
            continue
        mem = ", ".join(f"{f / 2**20:.1f} / {m / 2**20:.1f}" for f, m in zip(r["forecast_peak"], r["run_peak"]))
        lines.append(f"| {r['model']} | {r['schedule']} | {r.get('round', 0) + 1} | {r['forecast_step_ms']:.1f} | "
                     f"{r['run_step_ms']:.1f} | "
                     f"{r['time_error']:.1%} | {r['run_cpu_replay_ms'] or float('nan'):.1f} | "
                     f"{r['action_ms']:.2f} / {r['run_action_ms'] or float('nan'):.2f} | {mem} | "
                     f"{', '.join(f'{e:.1%}' for e in r['memory_errors'])} | {r['load_before']:.2f} | "
                     f"{r['host_slow_before']:.2f} / {r['host_slow_after']:.2f} |")
    ok = [r for r in rows if "error" not in r]
    if ok:
        t = [r["time_error"] for r in ok]
        m = [e for r in ok for e in r["memory_errors"]]
        lines += ["", f"Step time, forecast against the run's wall clock: median error {statistics.median(t):.1%}, "
                      f"worst {max(t):.1%} over {len(t)} runs (targets: median {TARGET_MEDIAN:.0%}, each within "
                      f"{TARGET_WORST:.0%}); within {TARGET_WORST:.0%}: {sum(x <= TARGET_WORST for x in t)} of "
                      f"{len(t)}. Peak memory per rank: median error {statistics.median(m):.1%}, worst {max(m):.1%} "
                      f"over {len(m)} ranks; within {TARGET_WORST:.0%}: {sum(x <= TARGET_WORST for x in m)} of "
                      f"{len(m)}. Failed runs: {len(rows) - len(ok)}."]
        cases: dict[tuple[str, str], list[float]] = {}
        for r in ok:
            cases.setdefault((r["model"], r["schedule"]), []).append(r["time_error"])
        if any(len(v) > 1 for v in cases.values()):
            med = [statistics.median(v) for v in cases.values()]
            lines += ["", f"Each case's median over its {max(len(v) for v in cases.values())} commands (rounds over all "
                          f"cases, minutes apart): median error {statistics.median(med):.1%}, worst {max(med):.1%} over "
                          f"{len(med)} cases; within {TARGET_WORST:.0%}: {sum(x <= TARGET_WORST for x in med)} of "
                          f"{len(med)}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    ap.add_argument("--schedules", nargs="*", default=SCHEDULES, choices=SCHEDULES)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per command")
    ap.add_argument("--repeat", type=int, default=1, help="rounds over all cases (each command run once a round)")
    args = ap.parse_args(argv)
    import torch

    rows, best = [], [host_speed()]
    command = "python -m benchmarks.schedules.heldout " + " ".join(argv if argv is not None else sys.argv[1:])
    for round_ in range(args.repeat):
        for model in args.models:
            for schedule in args.schedules:
                rows.append({**case(model, schedule, args.timeout, best), "round": round_})
                r = rows[-1]
                print(f"{model} {schedule}: " + (r["error"] if "error" in r else
                      f"forecast {r['forecast_step_ms']:.1f} ms, wall {r['run_step_ms']:.1f} ms ({r['time_error']:.1%}), "
                      f"memory errors {[round(e, 3) for e in r['memory_errors']]}, load {r['load_before']:.2f}"),
                      flush=True)
                _write(command, torch.__version__, rows)  # after every command: a run cut short keeps its rows
    return 0


def _write(command: str, torch_version: str, rows: list[dict[str, Any]]) -> None:
    from devplace_lite.files import write_text_atomic

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    result = {"command": command, "machine": f"{platform.machine()} {cpu}, {os.cpu_count()} cores", "torch": torch_version,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    write_text_atomic(HERE / "heldout.json", json.dumps(result, indent=1) + "\n")
    write_text_atomic(HERE / "heldout.md", "# Held-out models: forecast against the wall clock\n\n"
                      + (__doc__ or "").split("\n\n", 1)[1].split("Writes")[0] + report(result) + _FINDINGS)


if __name__ == "__main__":
    sys.exit(main())
