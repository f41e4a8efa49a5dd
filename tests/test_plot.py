"""The book's figures: Gantt labels never run into each other."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from devplace_lite import plot  # noqa: E402


def test_gantt_labels_fit_their_boxes_and_never_overlap():
    fig, axes = plt.subplots(2, 1, figsize=(8, 3.6), sharex=True)
    wide = [("s0", 0.0, 4.0, "B0", "red"), ("s0", 5.0, 4.0, "B1", "red"), ("s1", 1.0, 4.0, "B2", "red")]
    plot.gantt(axes[0], wide)
    narrow = [("s0", 0.0, 0.1, "F0", "blue"), ("s0", 0.1, 0.1, "F1", "blue"), ("s0", 5.0, 4.0, "B0", "red")]
    plot.gantt(axes[1], narrow)           # shares the first axes' 9 ms: 0.1 ms boxes are far too small
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert [t.get_text() for t in axes[0].texts] == ["B0", "B1", "B2"]
    assert [t.get_text() for t in axes[1].texts] == ["B0"]
    for ax in axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)
