"""Devices: a cluster of identical accelerators and CPU cores, and named accelerator specs.

Devices are numbered ``0..k-1`` for accelerators (named ``acc0..``) and ``k..k+l-1`` for CPU
cores (named ``cpu0..``). Accelerators have a memory cap; CPU cores have none and pay no
communication (DESIGN.md). Each device also has the one colour it is drawn in, in every figure
and schedule (`device_color`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import ClusterError
from .graph import Graph


@dataclass(frozen=True)
class Cluster:
    """``accelerators`` devices with ``memory`` bytes each (``inf`` = no cap) and ``cpus`` cores.

    >>> c = Cluster(accelerators=2, cpus=1, memory=16e9)
    >>> c.names
    ['acc0', 'acc1', 'cpu0']
    """

    accelerators: int = 1
    cpus: int = 0
    memory: float = math.inf

    def __post_init__(self) -> None:
        if int(self.accelerators) != self.accelerators or self.accelerators < 0:
            raise ClusterError(f"cluster: accelerators must be a non-negative integer, got {self.accelerators!r}")
        if int(self.cpus) != self.cpus or self.cpus < 0:
            raise ClusterError(f"cluster: cpus must be a non-negative integer, got {self.cpus!r}")
        if self.accelerators + self.cpus == 0:
            raise ClusterError("cluster: needs at least one device")
        if not (self.memory > 0):
            raise ClusterError(f"cluster: memory must be positive, got {self.memory!r}")

    @property
    def k(self) -> int:
        return int(self.accelerators)

    @property
    def l(self) -> int:  # noqa: E743 - the paper's name for the CPU count
        return int(self.cpus)

    @property
    def size(self) -> int:
        return self.k + self.l

    @property
    def names(self) -> list[str]:
        return [f"acc{i}" for i in range(self.k)] + [f"cpu{i}" for i in range(self.l)]

    def is_acc(self, d: int) -> bool:
        return d < self.k

    def device_index(self, name: str) -> int:
        """The index of device ``name``: ``accI`` is ``I``, ``cpuI`` is ``k + I``. Only ASCII
        digits without leading zeros (``acc01`` or a full-width ``acc１`` would be read as another
        spelling of ``acc1``, and an answer would name a device the file did not)."""
        m = re.fullmatch(r"(acc|cpu)(0|[1-9][0-9]*)", str(name))
        if not m:
            shown = repr(name) if len(str(name)) <= 40 else repr(str(name)[:37] + "...")
            raise ClusterError(f"unknown device name {shown} (expected acc0.. or cpu0.., decimal, no leading zeros)")
        kind, digits = m.groups()
        count = self.k if kind == "acc" else self.l
        # more digits than the count has is past it: int() of thousands of digits would refuse
        if len(digits) > len(str(count)) or int(digits) >= count:
            shown = name if len(name) <= 40 else f"{kind}{digits[:8]}...({len(digits)} digits)"
            what = "accelerator(s)" if kind == "acc" else "CPU core(s)"
            raise ClusterError(f"device {shown} does not exist: the cluster has {count} {what}")
        return int(digits) + (0 if kind == "acc" else self.k)

    @classmethod
    def for_graph(cls, graph: Graph, accelerators: int | None = None, cpus: int | None = None,
                  memory: float | None = None) -> "Cluster":
        """A cluster from explicit values, falling back to the graph file's defaults."""
        d = graph.defaults
        k = accelerators if accelerators is not None else d.get("accelerators", 1)
        l_ = cpus if cpus is not None else d.get("cpus", 0)
        mem = memory if memory is not None else d.get("memory", math.inf)
        if k == 0 and l_ == 0:  # name where each 0 came from: an option or the graph file
            said = [f"{flag} 0" + ("" if given is not None else " (the graph file's value)" if key in d else " (the default)")
                    for flag, given, key in (("-k", accelerators, "accelerators"), ("--cpus", cpus, "cpus"))]
            raise ClusterError(f"cluster: needs at least one device, got {' and '.join(said)}")
        return cls(accelerators=int(k), cpus=int(l_), memory=float(mem))


#: Accelerators get strong hues; CPU cores greys (they are the slow fallback).
DEVICE_COLORS = ["#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377",
                 "#EE8866", "#44BB99", "#BBCC33", "#997700", "#994455", "#6699CC"]
CPU_COLORS = ["#999999", "#777777", "#BBBBBB", "#555555"]


def device_color(cluster: Cluster, d: int) -> str:
    """The colour device ``d`` of ``cluster`` is drawn in (figures, Gantt charts).

    >>> device_color(Cluster(accelerators=2, cpus=1), 2)
    '#999999'
    """
    if d < cluster.k:
        return DEVICE_COLORS[d % len(DEVICE_COLORS)]
    return CPU_COLORS[(d - cluster.k) % len(CPU_COLORS)]


@dataclass(frozen=True)
class AcceleratorSpec:
    """Peak numbers of an accelerator, for roofline cost estimates.

    ``flops``: dense FP16/BF16 tensor peak in FLOP/s; ``bandwidth``: memory bandwidth in
    bytes/s; ``link``: host link bandwidth in bytes/s (PCIe), used for communication costs.
    A GPU of a cluster also has ``node`` GPUs beside it in one NVLink domain, ``nvlink``
    bytes/s to each of them and ``network`` bytes/s to other nodes (each one direction, per
    GPU); None where the spec is not such a GPU.
    """

    name: str
    flops: float
    bandwidth: float
    memory: float
    link: float
    node: int = 1
    nvlink: float | None = None
    network: float | None = None


# Vendor datasheet peaks (dense tensor-core FP16/BF16, HBM bandwidth, host link) of the SXM
# parts (the A100 in its 40 GB and 80 GB forms: 1,555 and 2,039 GB/s of HBM), in the nodes
# NVIDIA sells them in (8 GPUs): NVLink per GPU and direction (V100: 6 links,
# A100: 12, H100 and H200: 18, each 25 GB/s), and the node's InfiniBand shared by its GPUs
# (DGX-1: 4 x 100 Gb/s; DGX A100: 8 x 200 Gb/s; DGX H100 and HGX H200: 8 x 400 Gb/s).
SPECS: dict[str, AcceleratorSpec] = {
    "V100": AcceleratorSpec("V100", flops=125e12, bandwidth=900e9, memory=16 * 2**30, link=16e9,
                            node=8, nvlink=150e9, network=6.25e9),
    "A100": AcceleratorSpec("A100", flops=312e12, bandwidth=1555e9, memory=40 * 2**30, link=32e9,
                            node=8, nvlink=300e9, network=25e9),
    "A100-80GB": AcceleratorSpec("A100-80GB", flops=312e12, bandwidth=2039e9, memory=80 * 2**30, link=32e9,
                                 node=8, nvlink=300e9, network=25e9),
    "H100": AcceleratorSpec("H100", flops=989e12, bandwidth=3350e9, memory=80 * 2**30, link=64e9,
                            node=8, nvlink=450e9, network=50e9),
    "H200": AcceleratorSpec("H200", flops=989e12, bandwidth=4800e9, memory=141e9, link=64e9,
                            node=8, nvlink=450e9, network=50e9),
}


def spec(name: str) -> AcceleratorSpec:
    """Look up a named accelerator spec (case-insensitive)."""
    key = name.upper()
    if key not in SPECS:
        raise ClusterError(f"unknown accelerator spec {name!r}; known: {', '.join(SPECS)}")
    return SPECS[key]
