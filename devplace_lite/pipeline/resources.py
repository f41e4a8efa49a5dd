"""How many stages this machine can host, and what it is called: checked before anything starts.

A pipeline runs one process per stage: on CPU each process gets its share of the cores this
process may use, on GPUs each process one GPU (NCCL refuses two ranks on one device). This
module imports torch only to count GPUs, so the CLI can refuse a bad ``-k`` at once.

Example
-------
>>> available_devices("cpu") >= 1
True
"""

from __future__ import annotations

import os
import socket
from typing import Sequence

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


def check_resources(num_stages: int, device: str = "cpu", stage_bytes: Sequence[float] | None = None,
                    memory: float | None = None) -> None:
    """Raise a one-line `GraphError` when ``num_stages`` exceeds the devices this machine has,
    or when a stage's bytes (parameters, or the cost model's memory) exceed ``memory``."""
    have = available_devices(device)
    if num_stages > have:
        if device == "cuda":
            raise GraphError(f"k={num_stages} stages need {num_stages} GPUs (one NCCL process each), "
                             f"this machine has {have}; on one GPU, time the stages in one process "
                             f"(devplace pipeline stages) instead")
        raise GraphError(f"k={num_stages} stages need {num_stages} CPU cores (one process each), "
                         f"this machine has {have}")
    if memory is not None and stage_bytes is not None:
        for s, b in enumerate(stage_bytes):
            if b > memory:
                raise GraphError(f"stage {s} needs {b:.0f} bytes, over the memory cap of {memory:.0f} bytes per device")


def free_port() -> int:
    """A TCP port free on loopback now (for a rendezvous of this machine's processes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
