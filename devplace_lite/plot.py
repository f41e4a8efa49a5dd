"""The book's figures: one style, graphs coloured by device, Gantt charts of schedules."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .devices import CPU_COLORS, DEVICE_COLORS, Cluster, device_color
from .graph import Graph

__all__ = ["CPU_COLORS", "DEVICE_COLORS", "device_color", "draw_placement", "gantt", "layered_positions",
           "use_style"]


def use_style() -> None:
    """Apply the book's matplotlib style (call once at the top of a chapter)."""
    import matplotlib as mpl

    mpl.rcParams.update({
        "figure.figsize": (7.0, 3.6), "figure.dpi": 110, "savefig.dpi": 150,
        "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10,
        "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.3, "legend.frameon": False,
        "axes.prop_cycle": mpl.cycler(color=DEVICE_COLORS),
    })


def layered_positions(graph: Graph) -> np.ndarray:
    """x = longest-path depth of each node, y = its rank within that depth (centred)."""
    depth = np.zeros(graph.n, dtype=int)
    for v in graph.topological_order():
        for w in graph.succ[v]:
            depth[w] = max(depth[w], depth[v] + 1)
    pos = np.zeros((graph.n, 2))
    for x in range(depth.max() + 1 if graph.n else 0):
        members = np.flatnonzero(depth == x)
        pos[members, 0] = x
        pos[members, 1] = np.arange(len(members)) - (len(members) - 1) / 2
    return pos


def draw_placement(ax, graph: Graph, assignment: Sequence[int] | None = None, cluster: Cluster | None = None,
                   labels: bool | None = None, node_size: float | None = None, legend: bool = True) -> None:
    """Draw the DAG left to right by depth, nodes coloured by device (grey when unplaced)."""
    pos = layered_positions(graph)
    small = graph.n <= 40
    labels = graph.n <= 20 if labels is None else labels
    size = node_size or (260 if graph.n <= 20 else max(8, 4000 / max(graph.n, 1)))
    for s, t in zip(graph.src, graph.dst):
        # an edge that skips depths would run through the nodes between: bend it
        bend = (0.5 if s % 2 else -0.5) if pos[t, 0] - pos[s, 0] > 1 and pos[t, 1] == pos[s, 1] else 0.0
        ax.annotate("", xy=pos[t], xytext=pos[s],
                    arrowprops=dict(arrowstyle="-|>" if small else "-", color="#888888", lw=0.6,
                                    shrinkA=5 if small else 0, shrinkB=5 if small else 0,
                                    connectionstyle=f"arc3,rad={bend}"))
    if assignment is None or cluster is None:
        colors = ["#cccccc"] * graph.n
    else:
        colors = [device_color(cluster, int(d)) for d in assignment]
    ax.scatter(pos[:, 0], pos[:, 1], s=size, c=colors, edgecolors="black", linewidths=0.4, zorder=3)
    if labels:
        for i, v in enumerate(graph.nodes):
            ax.text(pos[i, 0], pos[i, 1], v.id, ha="center", va="center", fontsize=7, zorder=4)
    if legend and assignment is not None and cluster is not None:
        from matplotlib.lines import Line2D

        used = sorted(set(int(d) for d in assignment))
        handles = [Line2D([], [], marker="o", ls="", color=device_color(cluster, d), label=cluster.names[d])
                   for d in used]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    span = np.ptp(pos[:, 1]) if graph.n else 0
    if span < 2:  # a near-chain: leave room for the bent skip edges
        ax.set_ylim(pos[:, 1].min() - 2.5, pos[:, 1].max() + 2.5)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)


def gantt(ax, tasks: Iterable[tuple[str, float, float, str, str]], lanes: Sequence[str] | None = None,
          xlabel: str = "time (ms)") -> None:
    """Draw ``(lane, start, duration, label, color)`` boxes, one row per lane, first lane on top.

    A label is written only in a box wide enough for it (at the axes' width and the tasks' time
    span), and never outside its box (it is clipped to it), so neighbouring labels cannot overlap.
    """
    tasks = list(tasks)
    lanes = list(lanes) if lanes is not None else list(dict.fromkeys(t[0] for t in tasks))
    row = {name: i for i, name in enumerate(lanes)}
    lo = min((s for _, s, _, _, _ in tasks), default=0.0)
    hi = max((s + d for _, s, d, _, _ in tasks), default=1.0)
    for other in ax.get_shared_x_axes().get_siblings(ax):  # axes drawn before that share this time axis
        if other is not ax and other.has_data():
            lo, hi = min(lo, other.dataLim.x0), max(hi, other.dataLim.x1)
    span = hi - lo
    axes_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    for lane, start, dur, label, color in tasks:
        y = len(lanes) - 1 - row[lane]
        (box,) = ax.barh(y, dur, left=start, height=0.8, color=color, edgecolor="black", linewidth=0.4)
        fits = span > 0 and dur / span * axes_pt > 0.62 * 7 * len(label) + 2  # 7 pt glyphs are about 4.3 pt wide
        if label and fits:
            ax.text(start + dur / 2, y, label, ha="center", va="center", fontsize=7, clip_path=box)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes[::-1])
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", visible=False)
