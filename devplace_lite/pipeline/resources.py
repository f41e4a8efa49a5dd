"""How many ranks this machine can host, and what it is called: checked before anything starts.

A pipeline runs one process per rank: on CPU the processes share the cores this process may
use, on GPUs each process gets one GPU (NCCL refuses two ranks on one device). This module
imports torch only to count GPUs, so a bad ``-k`` is refused before torchrun starts.

Example
-------
>>> available_devices("cpu") >= 1
True
"""

from __future__ import annotations

import os
import socket

from ..graph import GraphError


def available_devices(device: str = "cpu") -> int:
    """How many stages this machine can host: CPU cores this process may use, or CUDA GPUs."""
    if device == "cpu":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if device == "cuda":
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    raise GraphError(f"unknown device {device!r} (expected cpu or cuda)")


def device_name(device: str = "cpu") -> str:
    """A human name of the hardware: the GPU's name, or the CPU model and core count."""
    if device == "cuda" and available_devices("cuda"):
        import torch

        return torch.cuda.get_device_name(0)
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{model or 'CPU'} ({available_devices('cpu')} cores)"


def check_resources(ranks: int, device: str = "cuda") -> None:
    """Raise a one-line `GraphError` when ``ranks`` processes need more GPUs than this machine
    has (NCCL refuses two ranks on one GPU). CPU ranks share cores (gloo), so any count runs."""
    have = available_devices(device)
    if device == "cuda" and ranks > have:
        raise GraphError(f"k={ranks} ranks need {ranks} GPUs (one NCCL process each), this machine has {have}; "
                         "on one GPU, plan with --device cuda: the segments timed there forecast the k-GPU pipeline")


def free_port() -> int:
    """A TCP port free on loopback now (for a rendezvous of this machine's processes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
