"""The uncounted StructRef handle (sgdsim.simulation.borrow): reads and writes reach
the payload, replaced fields are freed, nothing leaks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
from numba.core import types
from numba.experimental import structref

from sgdsim.simulation.borrow import borrow


@structref.register
class _BoxType(types.StructRef):
    def preprocess_fields(self, fields):  # type: ignore[no-untyped-def]
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class _Box(structref.StructRefProxy):
    pass


structref.define_proxy(_Box, _BoxType, ["a", "n"])


@numba.njit
def _fields(st):  # type: ignore[no-untyped-def]
    return st.a, st.n


@numba.njit
def _double(b) -> None:  # type: ignore[no-untyped-def]
    """Grow ``b.a`` to twice its length through the handle, as the loop's pools grow."""
    grown = np.zeros(2 * b.a.shape[0])
    grown[: b.a.shape[0]] = b.a
    b.a = grown
    b.n += 1


@numba.njit
def _work(st, rounds: int) -> float:  # type: ignore[no-untyped-def]
    b = borrow(st)
    for _ in range(rounds):
        _double(b)
        view = b.a[1:]  # a local view of the grown field
        view[-1] = b.n
    return b.a.sum()


def test_reads_and_writes_reach_the_payload() -> None:
    box = _Box(np.arange(3.0), 0)
    total = _work(box, 4)
    a, n = _fields(box)
    assert n == 4
    assert a.shape == (48,)
    assert list(a[:3]) == [0.0, 1.0, 2.0]
    # each round wrote its count in the last element of the array it grew to
    assert [a[k] for k in (5, 11, 23, 47)] == [1.0, 2.0, 3.0, 4.0]
    assert total == 3.0 + 1 + 2 + 3 + 4


def test_nothing_leaks() -> None:
    """Every meminfo allocated while a handle grows fields is freed with the box
    (numba's NRT statistics, which it keeps only when asked at start-up)."""
    code = textwrap.dedent(
        """
        import gc
        import numpy as np
        from numba.core.runtime import rtsys
        from test_borrow import _Box, _work
        _work(_Box(np.arange(3.0), 0), 1)  # compile
        gc.collect()
        before = rtsys.get_allocation_stats()
        box = _Box(np.arange(3.0), 0)
        _work(box, 10)
        del box
        gc.collect()
        after = rtsys.get_allocation_stats()
        print(after.mi_alloc - before.mi_alloc, after.mi_free - before.mi_free)
        """
    )
    env = dict(os.environ, NUMBA_NRT_STATS="1", PYTHONPATH=os.path.dirname(__file__))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    allocated, freed = int(out[0]), int(out[1])
    assert allocated >= 11  # the box's array and ten grown ones
    assert freed == allocated
