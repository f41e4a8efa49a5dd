"""Shared fixtures: the authors' published workloads (read from ../shared, never copied) and
small seeded graphs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path(os.environ.get("DEVPLACE_REFERENCE", ROOT.parent / "shared" / "reference" / "msr-dnn-partitioning"))


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The msr-dnn-partitioning folder beside the checkout; skips when it is absent."""
    if not (REFERENCE / "throughput-inputs").is_dir():
        pytest.skip(f"the authors' workloads are not at {REFERENCE} (they live in ../shared, outside the project)")
    return REFERENCE


def reference_files(kind: str = "throughput-inputs") -> list[Path]:
    """Workload files for parametrisation (empty when ../shared is absent; tests using the
    `reference_dir` fixture then skip with the reason)."""
    return sorted((REFERENCE / kind).glob("*/*.json")) if (REFERENCE / kind).is_dir() else []
