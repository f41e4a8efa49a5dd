"""Shared fixtures: the authors' published workloads (read from ../shared, never copied) and
small seeded graphs."""

from __future__ import annotations

from pathlib import Path

import pytest

from devplace_lite import reference

ROOT = Path(__file__).resolve().parent.parent
#: DEVPLACE_REFERENCE, else ../shared/reference/msr-dnn-partitioning; a path that holds nothing when neither does
REFERENCE = reference.reference_dir() or ROOT.parent / "shared" / "reference" / reference.NAME


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The authors' workloads (DEVPLACE_REFERENCE, else ../shared/reference); skips when absent."""
    found = reference.reference_dir()
    if found is None:
        pytest.skip(reference.MISSING)
    return found


def reference_files(kind: str = "throughput-inputs") -> list[Path]:
    """Workload files for parametrisation (empty when ../shared is absent; tests using the
    `reference_dir` fixture then skip with the reason)."""
    return sorted((REFERENCE / kind).glob("*/*.json")) if (REFERENCE / kind).is_dir() else []
