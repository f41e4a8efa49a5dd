"""The interactive figures' Python side (`devplace_course.interactive`): a figure refuses a
control whose default it cannot show and a grid with a setting left out, its page holds every
frame exactly (readout values unrounded, the JSON safe inside a script element), and its
picture is the default frame. The browser side is tests/test_book.py's."""

from __future__ import annotations

import base64
import json
import re

import pytest

from devplace_course.interactive import Control, Figure, gantt_panel, panel, readout
from devplace_lite.errors import UsageError


def small(frames_for=(1, 2, 4)) -> Figure:
    fig = Figure("fig-test", [Control("m", "micro-batches", [1, 2, 4], default=2),
                              Control("s", "schedule", ["gpipe", "1f1b"], default="1f1b", kind="select")],
                 heights=[60, 40], legend=[("#8fb8de", "forward")])
    for m in frames_for:
        for s in ("gpipe", "1f1b"):
            step = m * 1.0000001 + (s == "gpipe") / 3
            fig.add({"m": m, "s": s}, f"{s}, {m} micro-batches </script>",
                    [gantt_panel([("rank 0", 0.0, step, "F0", "#8fb8de")], ["rank 0"], step),
                     panel([0, 1], [0, step], lines=[["#000", [0, 1], [0, step], "rank 0"]])],
                    [readout("step", "step (ms)", step, f"{step:.1f}")])
    return fig


def test_a_control_must_hold_its_default_and_know_its_kind():
    with pytest.raises(UsageError, match="default 3"):
        Control("m", "micro-batches", [1, 2], default=3)
    with pytest.raises(UsageError, match="range or select"):
        Control("m", "micro-batches", [1, 2], default=2, kind="knob")


def test_every_setting_needs_a_frame():
    with pytest.raises(UsageError, match="4 of 6 settings"):
        small(frames_for=(1, 2)).spec()
    with pytest.raises(UsageError, match="lacks s"):
        small().add({"m": 1}, "t", [panel([0, 1], [0, 1])] * 2, [])
    with pytest.raises(UsageError, match="1 panel"):
        small().add({"m": 1, "s": "gpipe"}, "t", [panel([0, 1], [0, 1])], [])


def test_the_page_holds_every_frame_exactly():
    fig = small()
    page = fig.html()
    data = re.search(r'<script type="application/json">(.*?)</script>', page, re.S).group(1)
    assert "</script>" not in data          # a title cannot end the script element early
    spec = json.loads(data.replace("<\\/", "</"))
    assert spec == json.loads(json.dumps(fig.spec()))
    assert spec["controls"][1] == {"name": "s", "label": "schedule", "kind": "select", "labels": ["gpipe", "1f1b"],
                                   "default": 1}
    # readout values are kept exactly; drawing coordinates are rounded (the page's weight)
    frame = spec["frames"][fig.key({"m": 4, "s": "gpipe"})]
    assert frame["readout"][0][2] == 4 * 1.0000001 + 1 / 3
    assert frame["panels"][0]["rects"][0][2] == float(f"{4 * 1.0000001 + 1 / 3:.5g}")
    assert page.count('window.dlFigure(document.getElementById("fig-test"))') == 1


def test_the_picture_is_the_default_frame():
    fig = small()
    bundle = fig._repr_mimebundle_()
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(b"\x89PNG") and bundle["image/png"] in bundle["text/html"]   # the fallback in the page
    assert fig.default is fig.frame(m=2, s="1f1b") and "6 settings" in bundle["text/plain"]
    title = fig.static()._suptitle.get_text()
    assert "1f1b, 2 micro-batches" in title and "step (ms) 2.0" in title and "micro-batches = 2" in title
