"""The compiled kernels (`devplace_lite.compiled`): the same answers compiled and interpreted,
a stale build never used, and a small command that imports neither numba nor scipy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from devplace_lite import compiled
from devplace_lite.throughput import dp as dp_module, slicing
from devplace_lite.devices import Cluster
from devplace_lite.throughput.dp import dp, nested_pairs
from devplace_lite.generators import FAMILIES, generate, with_backward
from devplace_lite.throughput.ideals import enumerate_ideals
from devplace_lite.units import unit_graph

KERNELS = [dp_module._kernel, dp_module._count_pairs, slicing._block_ends, slicing._acc_costs, slicing._dp]


def _instances():
    for seed, fam in enumerate(sorted(FAMILIES)):
        g = generate(fam, 14, seed=seed)
        yield (with_backward(g) if seed % 2 else g), Cluster(accelerators=2 + seed % 3, cpus=seed % 2)


def _answers():
    out = []
    for g, c in _instances():
        r = dp(g, c)
        out.append((r.objective, r.status, r.extra["pairs"], r.extra["pairs_within"],
                    nested_pairs(enumerate_ideals(unit_graph(g, fold=True)))))
    return out


def test_compiled_kernels_answer_as_the_python_they_are_compiled_from(monkeypatch):
    compiled_answers = _answers()
    for k in KERNELS:
        monkeypatch.setattr(k, "_impl", k.py_func)
    assert _answers() == compiled_answers  # bit for bit: same float operations in the same order


def test_every_kernel_is_registered_and_resolves():
    assert {k.export_name for k in KERNELS} <= set(compiled.REGISTRY)
    for k in KERNELS:
        if k.mode is None:
            k._resolve()
        assert k.mode in ("aot", "jit")
        if compiled._aot_module():  # built by make install: every kernel comes from it
            assert k.mode == "aot", k.export_name


def _f(a):
    return a + 1


def _g(a):
    return a + 2


def test_an_edited_kernel_gets_another_export_name():
    same = compiled.Kernel(_f, "i8(i8)")
    assert same.export_name == compiled.Kernel(_f, "i8(i8)").export_name
    assert same.export_name != compiled.Kernel(_g, "i8(i8)").export_name  # other code
    assert same.export_name != compiled.Kernel(_f, "f8(f8)").export_name  # other signature
    assert same(41) == 42  # no build holds it: the JIT compiles it
    assert same.mode == "jit"


def test_a_small_partition_imports_neither_numba_nor_scipy(tmp_path):
    if not compiled._aot_module():
        pytest.skip("kernels not compiled ahead of time (make install builds them): the JIT imports numba")
    g = generate("layered", 30, seed=1)
    path = tmp_path / "g.json"
    from devplace_lite.io import save_graph

    save_graph(g, path)
    code = ("import sys, json; from devplace_lite.cli import main; "
            f"rc = main(['partition', {str(path)!r}, '--method', 'dp', '-k', '3', '--json']); "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'scipy', 'networkx', 'torch', 'tqdm'}); "
            "print(json.dumps(heavy), file=sys.stderr); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines()[-1] == "[]"
    assert '"status": "optimal"' in p.stdout


def test_arrays_of_another_type_are_refused_not_misread():
    """Code compiled ahead of time does not check its arrays: the wrapper must, or an int32
    array would be read as int64 (garbage or a crash). The JIT compiles another version."""
    good = (np.arange(5.0), np.zeros(5, dtype=np.int64), np.zeros(5), 1e9, 3.0)
    assert slicing._block_ends(*good).tolist() == [3, 4, 5, 5]
    if not compiled._aot_module():
        pytest.skip("kernels not compiled ahead of time")
    with pytest.raises(TypeError, match="argument 1 must be a C-contiguous 1-d int64 array"):
        slicing._block_ends(good[0], np.zeros(5, dtype=np.int32), *good[2:])
    with pytest.raises(TypeError, match="argument 0"):
        slicing._block_ends(np.arange(10.0)[::2], *good[1:])


def test_the_signature_parser_finds_every_array_argument():
    assert compiled._array_args("Tuple((f8[:, :, ::1], i1[::1]))(i8, f8[::1], i4[:, :], b1)") == \
        [(1, "float64", 1, True), (2, "int32", 2, False)]
