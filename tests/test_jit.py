"""The compiled loops' decorator: one compiled version per argument types."""

from __future__ import annotations

import numba

from sgdsim.simulation.jit import jit


def _add(a, b):  # type: ignore[no-untyped-def]
    return a + b


widened = jit(_add)
plain = numba.njit(_add)


@numba.njit
def _calls_widened(x):  # type: ignore[no-untyped-def]
    return widened(x, 1) + widened(x, 2)


@numba.njit
def _calls_plain(x):  # type: ignore[no-untyped-def]
    return plain(x, 1) + plain(x, 2)


def test_constants_passed_from_compiled_code_share_one_version():
    assert _calls_widened(3) == 3 + 1 + 3 + 2
    assert [tuple(str(t) for t in sig) for sig in widened.signatures] == [("int64", "int64")]
    # numba's own njit compiles the callee once per constant
    assert _calls_plain(3) == 9
    assert len(plain.signatures) == 2
