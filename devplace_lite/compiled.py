"""The library's compiled kernels: built ahead of time at install, numba's JIT otherwise.

A kernel is a plain Python function over numpy arrays and numbers, written once where its
algorithm lives (`devplace_lite.throughput.dp`, `devplace_lite.throughput.slicing`,
`devplace_lite.multidim._kernels`) and marked with `kernel` and its numba signature. The
functions a kernel calls are marked with `helper` (before the kernels of their module, whose
fingerprint then covers them): plain Python until a kernel of their module is compiled, then
numba functions in their module's namespace. Two ways to run it compiled, the same code either way:

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
>>> from devplace_lite.throughput.slicing import _block_ends
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
MODULES = ("throughput.dp", "throughput.slicing", "multidim._kernels")
#: The extension module the build writes (``devplace_lite/_aot.<platform tag>.so``).
AOT_MODULE = "_aot"

_aot: Any = None  # the loaded extension module, False when absent


def _code_key(code: CodeType) -> list:
    """What a code object computes, without line numbers (moving a kernel keeps its build)."""
    consts = [_code_key(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), consts, code.co_names, code.co_varnames]


#: Per module, the functions its kernels call (`helper`), by name.
HELPERS: dict[str, dict[str, Callable]] = {}


class Kernel:
    """A function compiled on first call: the ahead-of-time build if it matches, else the JIT.

    ``py_func`` is the plain Python function (runs interpreted, for tests and debugging);
    ``mode`` says which compiled form a call uses (``"aot"`` or ``"jit"``).
    """

    def __init__(self, fn: Callable, signature: str) -> None:
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self.signature = signature
        helpers = HELPERS.get(fn.__module__, {})
        key = repr([_code_key(fn.__code__), signature,
                    [[name, _code_key(h.__code__)] for name, h in sorted(helpers.items())]]).encode()
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
            self._impl, self.mode = _checked(impl, self.__name__, _array_args(self.signature)), "aot"
        else:
            self._impl, self.mode = self.jit(), "jit"

    def jit(self) -> Callable:
        """The numba JIT version (cached on disk)."""
        from numba import njit

        _compile_helpers(self.py_func.__module__)
        return njit(cache=True, nogil=True)(self.py_func)


def _compile_helpers(module: str) -> None:
    """Replace the helpers of ``module`` in its namespace by numba functions (once), so that
    its kernels, compiled by the JIT or ahead of time, call compiled code."""
    from numba import njit
    from numba.core.registry import CPUDispatcher

    ns = sys.modules[module].__dict__
    for name, fn in HELPERS.get(module, {}).items():
        if not isinstance(ns.get(name), CPUDispatcher):
            ns[name] = njit(cache=True, nogil=True)(fn)


_DTYPES = {"b1": "bool", "i1": "int8", "u1": "uint8", "i4": "int32", "i8": "int64", "f8": "float64"}


def _array_args(signature: str) -> list[tuple[int, str, int, bool]]:
    """``(position, dtype, ndim, C-contiguous)`` of each array argument of a numba signature
    such as ``"i8(f8[::1], i8, f8[:, :, ::1])"``."""
    depth, start = 0, len(signature)
    for i in range(len(signature) - 1, -1, -1):  # the parenthesis that opens the argument list
        depth += {")": 1, "(": -1}.get(signature[i], 0)
        if depth == 0:
            start = i
            break
    args, depth, cur = [], 0, ""
    for ch in signature[start + 1:-1] + ",":
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += {"[": 1, "]": -1}.get(ch, 0)
        cur += ch
    out = []
    for pos, a in enumerate(args):
        if "[" in a:
            base, dims = a[:-1].split("[")
            dims = [d.strip() for d in dims.split(",")]
            out.append((pos, _DTYPES[base.strip()], len(dims), dims[-1] == "::1"))
    return out


def _checked(impl: Callable, name: str, arrays: list[tuple[int, str, int, bool]]) -> Callable:
    """``impl`` refusing arrays of another type: compiled code ahead of time does not check them
    and would read their memory as the signature's type (garbage, or a crash)."""

    def call(*args: Any) -> Any:
        for pos, dtype, ndim, contiguous in arrays:
            a = args[pos]
            if not (getattr(a, "dtype", None) == dtype and a.ndim == ndim and (a.flags.c_contiguous or not contiguous)):
                raise TypeError(f"{name}: argument {pos} must be a {'C-contiguous ' if contiguous else ''}"
                                f"{ndim}-d {dtype} array, not {getattr(a, 'dtype', type(a).__name__)} "
                                f"{getattr(a, 'shape', '')}")
        return impl(*args)

    return call


REGISTRY: dict[str, Kernel] = {}


def kernel(signature: str) -> Callable[[Callable], Kernel]:
    """Mark a function as a compiled kernel with numba signature ``signature`` (module docstring)."""

    def mark(fn: Callable) -> Kernel:
        k = Kernel(fn, signature)
        REGISTRY[k.export_name] = k
        return k

    return mark


def helper(fn: Callable) -> Callable:
    """Mark a function that kernels of its module call (module docstring); returns it unchanged.

    Raises
    ------
    RuntimeError
        When a kernel of the module is already marked: its fingerprint would miss this code.
    """
    if any(k.py_func.__module__ == fn.__module__ for k in REGISTRY.values()):
        raise RuntimeError(f"helper {fn.__name__} of {fn.__module__} must come before the module's kernels")
    HELPERS.setdefault(fn.__module__, {})[fn.__name__] = fn
    return fn


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
        _compile_helpers(f"devplace_lite.{name}")
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
    compiled = importlib.import_module("devplace_lite.compiled")  # where kernels register (not __main__)
    try:
        print(f"compiled the kernels into {compiled.build()}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - any failure leaves the JIT in charge, which is correct
        print(f"devplace_lite: kernels not compiled ahead of time ({type(e).__name__}: {e}); "
              f"they will be compiled on first use", file=sys.stderr)
