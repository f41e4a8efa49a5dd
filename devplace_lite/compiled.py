"""The library's compiled kernels: built ahead of time at install, numba's JIT otherwise.

A kernel is a plain Python function over numpy arrays and numbers, written once where its
algorithm lives (`devplace_lite.dp`, `devplace_lite.slicing`) and marked with `kernel` and its
numba signature. Two ways to run it compiled, the same code either way:

* **Ahead of time.** ``make install`` runs ``python -m devplace_lite.compiled``, which compiles
  every kernel with numba's ahead-of-time compiler for this machine's CPU into one extension
  module next to this file. A command then loads it in milliseconds and never imports numba:
  a small graph is answered before numba could even start (about 0.7 s of CPU to import it and
  load cached code).
* **Just in time.** Where that module is missing (no C compiler, a wheel built elsewhere) or
  was built from other source, the kernel is compiled on first use by ``numba.njit`` with
  ``cache=True``: seconds the first time, then loaded from numba's on-disk cache.

Each kernel is exported under its name and a fingerprint of its code and signature, so an
edited kernel never runs stale machine code: it falls back to the JIT until the module is
rebuilt. ``DEVPLACE_JIT=1`` in the environment skips the ahead-of-time module.

Example
-------
>>> import numpy as np
>>> from devplace_lite.slicing import _block_ends
>>> _block_ends(np.arange(5.0), np.zeros(5, dtype=np.int64), np.zeros(5), 1e9, 3.0).tolist()
[3, 4, 5, 5]
>>> _block_ends.py_func is not None, _block_ends.mode in ("aot", "jit")
(True, True)
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import sys
from types import CodeType
from typing import Any, Callable

#: Modules whose kernels the ahead-of-time build compiles.
MODULES = ("dp", "slicing")
#: The extension module the build writes (``devplace_lite/_aot.<platform tag>.so``).
AOT_MODULE = "_aot"

_aot: Any = None  # the loaded extension module, False when absent


def _code_key(code: CodeType) -> list:
    """What a code object computes, without line numbers (moving a kernel keeps its build)."""
    consts = [_code_key(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), consts, code.co_names, code.co_varnames]


class Kernel:
    """A function compiled on first call: the ahead-of-time build if it matches, else the JIT.

    ``py_func`` is the plain Python function (runs interpreted, for tests and debugging);
    ``mode`` says which compiled form a call uses (``"aot"`` or ``"jit"``).
    """

    def __init__(self, fn: Callable, signature: str) -> None:
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self.signature = signature
        key = repr([_code_key(fn.__code__), signature]).encode()
        self.export_name = f"{fn.__module__.rsplit('.', 1)[-1]}_{fn.__name__.lstrip('_')}_" \
                           f"{hashlib.blake2b(key, digest_size=6).hexdigest()}"
        self._impl: Callable | None = None
        self.mode: str | None = None

    def __call__(self, *args: Any) -> Any:
        if self._impl is None:
            self._resolve()
        return self._impl(*args)

    def _resolve(self) -> None:
        impl = getattr(_aot_module(), self.export_name, None)
        if impl is not None:
            self._impl, self.mode = impl, "aot"
        else:
            self._impl, self.mode = self.jit(), "jit"

    def jit(self) -> Callable:
        """The numba JIT version (cached on disk)."""
        from numba import njit

        return njit(cache=True, nogil=True)(self.py_func)


REGISTRY: dict[str, Kernel] = {}


def kernel(signature: str) -> Callable[[Callable], Kernel]:
    """Mark a function as a compiled kernel with numba signature ``signature`` (module docstring)."""

    def mark(fn: Callable) -> Kernel:
        k = Kernel(fn, signature)
        REGISTRY[k.export_name] = k
        return k

    return mark


def _aot_module() -> Any:
    global _aot
    if _aot is None:
        _aot = False
        if not os.environ.get("DEVPLACE_JIT"):
            try:
                _aot = importlib.import_module(f"devplace_lite.{AOT_MODULE}")
            except ImportError:
                pass
    return _aot


def build(output_dir: str | None = None) -> str:
    """Compile every kernel of `MODULES` ahead of time for this CPU; returns the file written.

    Raises whatever numba's compiler raises (no C compiler, for one); the kernels then run
    under the JIT.
    """
    import warnings

    from numba.core.errors import NumbaPendingDeprecationWarning
    from numba.pycc import CC

    for name in MODULES:
        importlib.import_module(f"devplace_lite.{name}")
    cc = CC(AOT_MODULE)
    cc.output_dir = output_dir or os.path.dirname(os.path.abspath(__file__))
    cc.target_cpu = "host"  # built where it runs (make install): use this CPU's instructions
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        for k in REGISTRY.values():
            cc.export(k.export_name, k.signature)(k.py_func)
        cc.compile()
    return os.path.join(cc.output_dir, cc.output_file)


if __name__ == "__main__":
    from devplace_lite import compiled  # the module the kernels registered with, not __main__

    try:
        print(f"compiled the kernels into {compiled.build()}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - any failure leaves the JIT in charge, which is correct
        print(f"devplace_lite: kernels not compiled ahead of time ({type(e).__name__}: {e}); "
              f"they will be compiled on first use", file=sys.stderr)
