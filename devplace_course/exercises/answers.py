"""The one way answers leave a graded submission: JSON values, never pickles.

The grader's worker encodes what the learner's function returned; the grader decodes it outside
the sandbox and compares it there. Only data comes back: numbers (with their numpy type, so a
float32 answer is told why it misses), arrays of numbers or booleans, tuples, lists, strings and
``None``, within a size and nesting limit. Anything else is an answer of the wrong type.

>>> import numpy as np
>>> line = dumps((np.float32(1.5), np.arange(3), [None, float("inf")]))
>>> loads(line)
(np.float32(1.5), array([0, 1, 2]), [None, inf])
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

#: the longest answer line the grader reads (bytes); a longer one is an error of that instance
MAX_BYTES = 4 << 20
_MAX_DEPTH = 20
_MAX_ITEMS = 1 << 20
_KINDS = "biuf"  # booleans, integers, floats


class AnswerError(ValueError):
    """An answer that cannot cross the wire (type, size, nesting); the message says which."""


def encode(x: Any, depth: int = 0) -> Any:
    """A JSON-ready form of an answer."""
    if depth > _MAX_DEPTH:
        raise AnswerError(f"an answer nested more than {_MAX_DEPTH} deep")
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, np.bool_):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, float) and type(x) is float:
        return x if math.isfinite(x) else {"float": repr(x)}
    if isinstance(x, np.floating):
        return {"scalar": float(x) if math.isfinite(float(x)) else repr(float(x)), "dtype": x.dtype.name}
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in _KINDS:
            raise AnswerError(f"an array of dtype {x.dtype} (numbers or booleans only)")
        if x.size > _MAX_ITEMS:
            raise AnswerError(f"an array of {x.size} entries (at most {_MAX_ITEMS})")
        flat = [v if math.isfinite(v) else repr(v) for v in x.astype(float).ravel().tolist()] \
            if x.dtype.kind == "f" else x.ravel().tolist()
        return {"array": flat, "dtype": x.dtype.name, "shape": list(x.shape)}
    if isinstance(x, tuple):
        return {"tuple": [encode(v, depth + 1) for v in x]}
    if isinstance(x, list):
        if len(x) > _MAX_ITEMS:
            raise AnswerError(f"a list of {len(x)} items (at most {_MAX_ITEMS})")
        return [encode(v, depth + 1) for v in x]
    raise AnswerError(f"an answer of type {type(x).__name__} (numbers, arrays, tuples, lists or None only)")


def decode(x: Any, depth: int = 0) -> Any:
    """The answer an `encode` form stands for; `AnswerError` for anything else."""
    if depth > _MAX_DEPTH:
        raise AnswerError(f"an answer nested more than {_MAX_DEPTH} deep")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        return [decode(v, depth + 1) for v in x]
    if isinstance(x, dict):
        if set(x) == {"float"}:
            return float(_finite_or(x["float"]))
        if set(x) == {"scalar", "dtype"}:
            return _dtype(x["dtype"]).type(_finite_or(x["scalar"]))
        if set(x) == {"array", "dtype", "shape"}:
            dtype, shape = _dtype(x["dtype"]), x["shape"]
            if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
                raise AnswerError("an array with a malformed shape")
            values = x["array"]
            if not isinstance(values, list) or len(values) != math.prod(shape) or len(values) > _MAX_ITEMS:
                raise AnswerError("an array whose entries do not fill its shape")
            if dtype.kind == "f":
                values = [_finite_or(v) for v in values]
            try:
                return np.array(values, dtype=dtype).reshape(shape)
            except (TypeError, ValueError, OverflowError) as e:
                raise AnswerError(f"an array that does not parse: {e}") from None
        if set(x) == {"tuple"} and isinstance(x["tuple"], list):
            return tuple(decode(v, depth + 1) for v in x["tuple"])
    raise AnswerError("an answer in an unknown form")


def _finite_or(v: Any) -> float:
    if isinstance(v, str):
        if v not in ("inf", "-inf", "nan"):
            raise AnswerError(f"a number written as {v[:20]!r}")
        return float(v)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise AnswerError("a number that is not a number")
    return float(v)


def _dtype(name: Any) -> np.dtype:
    try:
        dtype = np.dtype(str(name))
    except TypeError:
        raise AnswerError(f"an unknown dtype {str(name)[:20]!r}") from None
    if dtype.kind not in _KINDS:
        raise AnswerError(f"an array of dtype {dtype} (numbers or booleans only)")
    return dtype


def dumps(x: Any) -> str:
    """One JSON line for an answer."""
    return json.dumps(encode(x), allow_nan=False)


def loads(line: str | bytes) -> Any:
    """The answer of one JSON line (`AnswerError` if it is not one)."""
    if len(line) > MAX_BYTES:
        raise AnswerError(f"an answer of {len(line)} bytes (at most {MAX_BYTES})")
    try:
        return decode(json.loads(line))
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as e:
        raise AnswerError(f"an answer that is not JSON: {type(e).__name__}") from None
