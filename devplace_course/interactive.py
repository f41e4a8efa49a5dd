"""Figures a reader can move: the library's answers over a grid of settings, drawn in the page.

A chapter builds a `Figure`: its controls (a slider or a menu each) and, for every combination
of their values, one *frame* that the library computed while the chapter ran: panels of boxes,
lines and dots in data coordinates, a title and a readout of the figure's numbers. Nothing is
computed in the browser: ``interactive.js`` (beside this module, inlined into the output, no
other library and nothing fetched) reads the frames from a JSON block, builds labelled,
keyboard-operable controls (``<label for>`` with ``<input type=range>`` or ``<select>``) and
draws the selected frame as SVG; each readout value sits in an ``<output data-key data-value>``
that the rendered-book test reads back.

Displayed in a notebook, a `Figure` offers two renderings: ``text/html`` (the moving figure,
which the HTML book shows) and ``image/png`` (the default setting's frame drawn by matplotlib),
which the single-page HTML behind the PDF shows instead (``chapters/_config.yml`` ranks PNG
first for the ``singlehtml`` builder), in both editions. The HTML holds that picture too, and
the script replaces it: where no script runs (a notebook its reader has not trusted), the
default frame still shows.

Example
-------
>>> fig = Figure("demo", [Control("m", "micro-batches", [1, 2], default=2)])
>>> for m in (1, 2):
...     fig.add({"m": m}, f"{m} micro-batches", [panel([0, m], [0, 1], rects=[[0, 0, m, 1, "#8fb8de", "F"]])],
...             [readout("step", "step (ms)", float(m), f"{m:.1f}")])
>>> fig.frame(m=2)["readout"][0][2], "dl-figure" in fig.html()
(2.0, True)
"""

from __future__ import annotations

import base64
import html
import io
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from devplace_lite.errors import UsageError

#: The drawing code, inlined into every figure's HTML (it defines itself once per page).
SCRIPT = Path(__file__).with_name("interactive.js")


@dataclass
class Control:
    """One control: ``name`` (the setting's key), ``label`` (what the reader sees), the
    ``values`` it steps through, its ``default`` value, and ``kind``: ``"range"`` (a slider,
    for ordered values) or ``"select"`` (a menu)."""

    name: str
    label: str
    values: Sequence[Any]
    default: Any
    kind: str = "range"

    def __post_init__(self) -> None:
        if self.default not in self.values:
            raise UsageError(f"control {self.name}: default {self.default!r} is not one of {list(self.values)}")
        if self.kind not in ("range", "select"):
            raise UsageError(f"control {self.name}: kind must be range or select, not {self.kind!r}")


def panel(x: Sequence[float], y: Sequence[float], *, title: str = "", xlabel: str = "", ylabel: str = "",
          xticks: Sequence[tuple[float, str]] | None = None, yticks: Sequence[tuple[float, str]] | None = None,
          rects: Sequence[Sequence[Any]] = (),
          lines: Sequence[Sequence[Any]] = (), dots: Sequence[Sequence[Any]] = (),
          segs: Sequence[Sequence[float]] = ()) -> dict:
    """One panel of a frame, in data coordinates over ``x = [lo, hi]`` and ``y = [lo, hi]``.

    Parameters
    ----------
    rects : ``[x, y, width, height, colour, label]`` (a seventh item, true, hatches the box)
    lines : ``[colour, xs, ys, label]`` polylines (a step function is given by its corners)
    dots : ``[x, y, colour, label]``
    segs : ``[x1, y1, x2, y2]`` grey line segments (a graph's edges)
    xticks, yticks : ``[(x, label)]``, ``[(y, label)]``; round numbers when omitted

    Returns
    -------
    dict
        The panel, as the page and `Figure.static` draw it.

    Examples
    --------
    >>> panel([0, 2], [0, 1], rects=[[0, 0, 1, 1, "#fff", "a"]])["rects"][0][4]
    '#fff'
    """
    return {"x": [float(x[0]), float(x[1])], "y": [float(y[0]), float(y[1])], "title": title, "xlabel": xlabel,
            "ylabel": ylabel, "xticks": [[float(v), str(s)] for v, s in xticks] if xticks is not None else None,
            "yticks": [[float(v), str(s)] for v, s in yticks] if yticks is not None else None,
            "rects": [list(r) for r in rects], "lines": [list(ln) for ln in lines], "dots": [list(d) for d in dots],
            "segs": [list(s) for s in segs]}


def gantt_panel(tasks: Sequence[tuple[str, float, float, str, str]], lanes: Sequence[str], span: float,
                title: str = "", xlabel: str = "time (ms)") -> dict:
    """A Gantt chart as a panel: `devplace_lite.plot.gantt`'s ``(lane, start, duration, label,
    colour)`` tasks, the first lane on top, over ``[0, span]``.

    Examples
    --------
    >>> gantt_panel([("rank 0", 0.0, 1.0, "F0", "#8fb8de")], ["rank 0", "rank 1"], 2.0)["rects"]
    [[0.0, 1.1, 1.0, 0.8, '#8fb8de', 'F0']]
    """
    row = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}
    return panel([0, span], [0, len(lanes)], title=title, xlabel=xlabel,
                 yticks=[(row[n] + 0.5, n) for n in lanes],
                 rects=[[float(s), row[lane] + 0.1, float(d), 0.8, color, label] for lane, s, d, label, color in tasks])


def readout(key: str, label: str, value: Any, text: str) -> list:
    """One number of a frame: its ``key`` (what a test looks for), its ``label``, the exact
    ``value`` (kept in the page as ``data-value``) and the ``text`` the reader sees."""
    return [key, label, value, text]


def _round(x: Any) -> Any:
    """Drawing coordinates to 5 significant digits (the page's size; readout values stay exact)."""
    if isinstance(x, float):
        return float(f"{x:.5g}")
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


@dataclass
class Figure:
    """A figure with ``controls``: one frame per combination of their values (`add`), drawn
    moving in the HTML book and still, at the defaults, in the PDF.

    Parameters
    ----------
    name : str
        The figure's id in the page (letters, digits and dashes), unique in its chapter.
    controls : sequence of Control
    heights : sequence of int
        Height in pixels (of a 680-pixel-wide drawing) of each panel's plotting area.
    legend : sequence of (colour, label)
    """

    name: str
    controls: Sequence[Control]
    heights: Sequence[int] = (180,)
    legend: Sequence[tuple[str, str]] = ()
    frames: dict[str, dict] = field(default_factory=dict)

    def key(self, setting: Mapping[str, Any]) -> str:
        """The frame key of a setting: each control's value index, ``|``-joined."""
        missing = [c.name for c in self.controls if c.name not in setting]
        if missing:
            raise UsageError(f"figure {self.name}: the setting lacks {', '.join(missing)}")
        return "|".join(str(list(c.values).index(setting[c.name])) for c in self.controls)

    def add(self, setting: Mapping[str, Any], title: str, panels: Sequence[dict], values: Sequence[list]) -> None:
        """Record the frame of ``setting`` (a value for every control): its ``title``, its
        ``panels`` (`panel`), one per height, and its ``values`` (`readout`)."""
        if len(panels) != len(self.heights):
            raise UsageError(f"figure {self.name}: {len(panels)} panel(s), {len(self.heights)} height(s)")
        self.frames[self.key(setting)] = {"title": title, "panels": [_round(p) for p in panels],
                                          "readout": [list(v) for v in values]}

    def frame(self, **setting: Any) -> dict:
        """The recorded frame of ``setting``."""
        return self.frames[self.key(setting)]

    @property
    def default(self) -> dict:
        """The frame at every control's default."""
        return self.frame(**{c.name: c.default for c in self.controls})

    def spec(self) -> dict:
        """What the page reads: the controls, the panels' heights and every frame."""
        settings = 1
        for c in self.controls:
            settings *= len(c.values)
        if len(self.frames) != settings:
            raise UsageError(f"figure {self.name}: {len(self.frames)} of {settings} settings have a frame")
        return {"id": self.name, "heights": list(self.heights), "frames": self.frames,
                "controls": [{"name": c.name, "label": c.label, "kind": c.kind, "labels": [str(v) for v in c.values],
                              "default": list(c.values).index(c.default)} for c in self.controls]}

    def html(self, png: bytes | None = None) -> str:
        """The moving figure: the frames as JSON, the empty controls and drawing, the script,
        and ``png`` (`png` when omitted), the default frame's picture, which the script takes
        away: where no script runs (an untrusted notebook, a reader without JavaScript) the
        picture stays."""
        data = json.dumps(self.spec(), separators=(",", ":")).replace("</", "<\\/")
        still = base64.b64encode(self.png() if png is None else png).decode()
        legend = "".join(f'<span><i style="background:{html.escape(c)}"></i>{html.escape(t)}</span>'
                         for c, t in self.legend)
        return (f'<div class="dl-figure" id="{self.name}">'
                f'<script type="application/json">{data}</script>'
                f'<img class="dl-static" style="max-width:100%" alt="{html.escape(self.default["title"])}"'
                f' src="data:image/png;base64,{still}">'
                f'<form class="dl-controls" onsubmit="return false"></form>'
                f'<svg role="img" xmlns="http://www.w3.org/2000/svg"></svg>'
                + (f'<div class="dl-legend">{legend}</div>' if legend else "") +
                f'<p class="dl-caption"></p><p class="dl-readout" aria-live="polite"></p></div>'
                f'<script>{SCRIPT.read_text(encoding="utf-8")}\n'
                f'window.dlFigure(document.getElementById("{self.name}"));</script>')

    def static(self):
        """The default frame drawn by matplotlib (a `matplotlib.figure.Figure`, no pyplot state)."""
        from matplotlib.figure import Figure as MplFigure
        from matplotlib.patches import Patch

        frame = self.default
        rows = [h / 72 + 0.55 for h in self.heights]
        fig = MplFigure(figsize=(7.5, sum(rows) + 0.7), layout="constrained")
        axes = fig.subplots(len(rows), 1, squeeze=False, height_ratios=rows)[:, 0]
        for ax, p in zip(axes, frame["panels"]):
            for a, b, c, d in p["segs"]:
                ax.plot([a, c], [b, d], color="#888888", lw=0.6, zorder=1)
            for x, y, w, h, color, label, *hatch in p["rects"]:
                if hatch and hatch[0]:
                    ax.bar(x, h, width=w, bottom=y, align="edge", color="none", hatch="///", lw=0)
                    continue
                (box,) = ax.bar(x, h, width=w, bottom=y, align="edge", color=color, edgecolor="black", linewidth=0.4)
                # a label only where it fits its box (7-point glyphs, about 4.3 points wide)
                if label and w / (p["x"][1] - p["x"][0]) * 7.5 * 72 * 0.85 > 4.5 * len(label) + 2:
                    ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=7, clip_path=box)
            for color, xs, ys, label in p["lines"]:
                ax.plot(xs, ys, color=color, lw=1.4, label=label or None)
            for x, y, color, label in p["dots"]:
                ax.scatter([x], [y], s=90, c=[color], edgecolors="black", linewidths=0.4, zorder=3)
                ax.annotate(label, (x, y), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=7)
            ax.set_xlim(*p["x"])
            ax.set_ylim(*p["y"])
            if p["xticks"] is not None:
                ax.set_xticks([v for v, _ in p["xticks"]], [s for _, s in p["xticks"]])
            if p["yticks"] is not None:
                ax.set_yticks([v for v, _ in p["yticks"]], [s for _, s in p["yticks"]])
                ax.grid(axis="y", visible=False)
            ax.set_title(p["title"], fontsize=9, loc="left")
            ax.set_xlabel(p["xlabel"])
            ax.set_ylabel(p["ylabel"])
            if any(ln[3] for ln in p["lines"]):
                ax.legend(fontsize=7, loc="upper right")
        setting = ", ".join(f"{c.label} = {c.default}" for c in self.controls)
        numbers = "; ".join(f"{label} {text}" for _, label, _, text in frame["readout"])
        head = textwrap.fill(f"{frame['title']}: {numbers}", 110)
        fig.suptitle(f"{head}\n(at {setting}; in the HTML book these move)", fontsize=9)
        if self.legend:
            fig.legend(handles=[Patch(facecolor=c, edgecolor="black", label=t) for c, t in self.legend],
                       loc="outside lower center", ncol=len(self.legend), fontsize=8)
        return fig

    def png(self) -> bytes:
        """`static` as PNG bytes."""
        buf = io.BytesIO()
        self.static().savefig(buf, format="png", dpi=110)
        return buf.getvalue()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict:
        png = self.png()
        return {"text/html": self.html(png), "image/png": base64.b64encode(png).decode(),
                "text/plain": f"<interactive figure {self.name}: {len(self.frames)} settings>"}
