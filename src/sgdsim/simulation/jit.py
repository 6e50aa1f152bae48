"""The decorators of the compiled loops: numba functions cached on disk, one
compiled version per argument *types*.

numba types an ``int`` constant passed from compiled code (``_schedule(st, t,
_JOIN, _K_GAP, w, 0, 0)``) as ``Literal[int](value)`` and compiles the callee,
and everything it calls with a constant, once per value: 92 compilations of 63
functions in the asynchronous loops, 170 s on a cold cache. :func:`jit` widens
those constants to their plain type before dispatch, so every call site shares
one version; the code is the same (LLVM still folds the constants it sees).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
from numba.core import types


def jit(fn: Callable[..., Any]) -> Any:
    """``numba.njit(cache=True, nogil=True)`` without per-constant versions."""
    dispatcher: Any = numba.njit(cache=True, nogil=True)(fn)
    typed = dispatcher.get_call_template

    def get_call_template(args: tuple[Any, ...], kws: dict[str, Any]) -> Any:
        return typed(
            tuple(types.unliteral(a) for a in args),
            {k: types.unliteral(v) for k, v in kws.items()},
        )

    dispatcher.get_call_template = get_call_template
    return dispatcher


#: Small helpers inlined into their callers at numba's IR (no call, no version).
inline = numba.njit(cache=True, nogil=True, inline="always")
