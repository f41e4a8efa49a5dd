"""What one pipeline message costs its receiver on this machine, beyond CPU time (gloo, CPU).

torch's schedules post a stage's receive only when the stage reaches the action that needs it
(`_sorted_batch_p2p`, then `_wait_batch_p2p`), and gloo moves the data once both sides have
posted. Two processes reproduce the two cases a pipeline run mixes: the receiver posts
*early* (it waits for a sender still computing) or *late* (the sender posted first and has
gone on computing). For each, the receiver's wall time in posting and in waiting and its CPU
time, median over the measured messages, once per process pair (the late case moved from 0.1
to 2-4 ms between process pairs on this 2-vCPU machine; see ``heldout.md``):

    python -m benchmarks.schedules.messages [--floats N] [--tensors K] [--pairs P]

Benchmarks measure; nothing asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time

from devplace_lite.pipeline.resources import free_port

MESSAGES, SKIP = 25, 5


def _busy(torch, ms: float) -> None:
    t, x = time.perf_counter(), torch.randn(128, 128)
    while (time.perf_counter() - t) * 1e3 < ms:
        x = torch.tanh(x @ x)


def _pair(rank: int, port: int, late: bool, floats: int, tensors: int, out) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    bufs = [torch.randn(floats) for _ in range(tensors)]
    seen = []
    for _ in range(MESSAGES):
        dist.barrier()
        if rank == 0:
            _busy(torch, 2)
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, b, 1) for b in bufs])
            _busy(torch, 10)  # the sender computes its next pass
            for w in works:
                w.wait()
        else:
            if late:
                _busy(torch, 5)  # still in its own pass when the data is sent
            c0, t0 = time.thread_time(), time.perf_counter()
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, b, 0) for b in bufs])
            t1 = time.perf_counter()
            for w in works:
                w.wait()
            seen.append((1e3 * (t1 - t0), 1e3 * (time.perf_counter() - t1), 1e3 * (time.thread_time() - c0)))
    if rank == 1:
        out.put([statistics.median(x[i] for x in seen[SKIP:]) for i in range(3)])
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--floats", type=int, default=8192, help="float32 values per tensor (default 8192: 32 KiB)")
    ap.add_argument("--tensors", type=int, default=1, help="tensors per message (default 1)")
    ap.add_argument("--pairs", type=int, default=5, help="process pairs per case (default 5)")
    args = ap.parse_args(argv)
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    print(f"{args.tensors} x {args.floats * 4 // 1024} KiB per message, median of {MESSAGES - SKIP} messages per pair; "
          "the sender sends 2 ms after the step's barrier, the late receiver posts 5 ms after it")
    for late in (False, True):
        for _ in range(args.pairs):
            out, port = ctx.Queue(), free_port()
            procs = [ctx.Process(target=_pair, args=(r, port, late, args.floats, args.tensors, out)) for r in (0, 1)]
            for p in procs:
                p.start()
            post, wait, cpu = out.get(timeout=120)
            for p in procs:
                p.join()
            print(f"receiver {'late ' if late else 'early'}: post {post:5.2f} ms, wait {wait:5.2f} ms, CPU {cpu:4.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
