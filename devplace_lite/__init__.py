"""devplace_lite: device placement of DNN operator graphs, and the library behind the book.

``import devplace_lite`` loads nothing heavy (no torch); `plan` imports torch when called.
"""

from __future__ import annotations

from typing import Any, Sequence


def plan(model: Any, example_inputs: Sequence[Any], **options: Any):
    """Plan ``model``'s pipeline: capture, measure, exact split, proven bound, stage memory.

    ``example_inputs`` is one step's batch. Options (``k`` is required): see
    `devplace_lite.pipeline.planner.plan`. Returns a `PipelinePlan`; ``.write(folder)``
    writes ``plan.json`` and a torchrun script.
    """
    from .pipeline.planner import plan as _plan

    return _plan(model, example_inputs, **options)
