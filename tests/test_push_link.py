"""The compiled workers → PS link of the fast loop (sgdsim.simulation.push_link)."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdsim.bench import synthetic_resnet50
from sgdsim.simulation import Network, push_link, simulate_async


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.floats(0, 10, allow_nan=False).map(lambda x: round(x, 1))),
        max_size=60,
    )
)
def test_heap_pops_in_the_order_of_heapq(ops):
    # None pops, a float pushes (key, next sequence number); a key of 10 replaces
    # the top (sift down) when there is one: equal keys leave in push order, as
    # heapq's tuples do
    h = np.zeros((3, len(ops) + 1))
    ref: list[tuple[float, int, int]] = []
    n = 0
    for seq, op in enumerate(ops):
        if op is None:
            if not ref:
                continue
            want = heapq.heappop(ref)
            assert tuple(h[:, 0]) == want
            n = push_link.heap_pop(h, n)
        elif op == 10 and ref:
            heapq.heapreplace(ref, (op, seq, 100 + seq))
            push_link.heap_sift_down(h, n, op, seq, 100 + seq)
        else:
            heapq.heappush(ref, (op, seq, 100 + seq))
            n = push_link.heap_push(h, n, op, seq, 100 + seq)
        assert n == len(ref)
        if ref:
            assert tuple(h[:, 0]) == ref[0]


@pytest.mark.parametrize(("workers", "bandwidth"), [(3, 2e8), (24, 1e9), (24, 1e11)])
def test_growing_the_arrays_mid_run_leaves_every_figure_as_it_was(workers, bandwidth, monkeypatch):
    # records and the clock's log start small and double when full: a run that
    # grows them at almost every step must give the figures bit for bit
    w = synthetic_resnet50()
    net = Network(bandwidth, 1e-5)
    log_a: list[list[float]] = []
    a = simulate_async(w, net, workers, 6, 1, seed=3, step_log=log_a)
    monkeypatch.setattr(push_link, "RECORDS0", 1)
    monkeypatch.setattr(push_link, "LOG0", 2)
    log_b: list[list[float]] = []
    b = simulate_async(w, net, workers, 6, 1, seed=3, step_log=log_b)
    assert log_a == log_b
    assert (a.steps_per_s, a.ps_up_util, a.bytes_pushed, a.events) == (
        b.steps_per_s, b.ps_up_util, b.bytes_pushed, b.events,
    )  # fmt: skip
