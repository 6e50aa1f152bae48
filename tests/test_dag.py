"""The DAG model of synchronous SGD and gradient grouping, checked by hand."""

from __future__ import annotations

import pytest

from sgdsim.simulation.dag import (
    fixed_buckets,
    mgwfbp_groups,
    ring_allreduce_s,
    wfbp_iteration,
)

MIB = 2**20


def test_ring_allreduce_by_hand():
    # 2·3·1 ms + 2·3/4 · 4 MB · 1 ns = 6 ms + 6 ms
    assert ring_allreduce_s(4e6, 4, 1e-3, 1e-9) == pytest.approx(1.2e-2, rel=1e-12)
    assert ring_allreduce_s(4e6, 1, 1e-3, 1e-9) == 0.0
    with pytest.raises(ValueError):
        ring_allreduce_s(1.0, 0, 1e-3, 1e-9)


def test_wfbp_recurrences_by_hand():
    # layers 0, 1, 2 (backward starts at 2): τb = (5, 3, 0), τc[2] = 3,
    # τc[1] = max(3 + 4, 3 + 2) = 7, τc[0] = max(7 + 1, 5 + 1) = 8, end 8 + 2
    t = wfbp_iteration([1.0, 2.0, 3.0], [2.0, 1.0, 4.0], update_s=0.5, forward_s=1.0)
    assert t.tau_b == (5.0, 3.0, 0.0)
    assert t.tau_c == (8.0, 7.0, 3.0)
    assert t.iteration_s == pytest.approx(10.0 + 0.5 + 1.0)


def test_mgwfbp_merges_when_the_wait_is_shorter_than_alpha():
    # tc = α + bytes·β = 3 each; unmerged the channel ends at 10. Layer 2's
    # communication started 1 s before layer 1's gradient is ready (wait 1 < α 2):
    # merge; then layer 1 (with 2) likewise into 0: one message, ending at 8.
    def comm(b: float) -> float:
        return 2.0 + b

    assert wfbp_iteration([1.0] * 3, [3.0] * 3).iteration_s == pytest.approx(10.0)
    assert mgwfbp_groups([1.0] * 3, [1.0] * 3, comm, 2.0) == [[2, 1, 0]]
    assert wfbp_iteration([1.0] * 3, [5.0, 0.0, 0.0]).iteration_s == pytest.approx(8.0)
    # with α = 0.5 the waits (1 and 0.5 s) are not shorter than α: no merge
    assert mgwfbp_groups([1.0] * 3, [1.0] * 3, lambda b: 0.5 + b, 0.5) == [[2], [1], [0]]


def test_mgwfbp_merges_a_communication_that_has_not_started():
    # α 0.1, β 1: tc = (1.1, 1.1, 5.1). Layer 1's communication waits for the
    # channel until 6.1, after layer 0's gradient is ready (2.1): merge it into 0
    # (ends at 8.2 instead of 8.3); layer 2's started 0.1 s earlier: no merge.
    groups = mgwfbp_groups([1.0, 0.1, 1.0], [1.0, 1.0, 5.0], lambda b: 0.1 + b, 0.1)
    assert groups == [[2], [1, 0]]
    unmerged = wfbp_iteration([1.0, 0.1, 1.0], [1.1, 1.1, 5.1]).iteration_s
    merged = wfbp_iteration([1.0, 0.1, 1.0], [2.1, 0.0, 5.1]).iteration_s
    assert (unmerged, merged) == (pytest.approx(8.3), pytest.approx(8.2))


def test_ddp_buckets_close_at_their_caps():
    sizes = [0.5 * MIB, 0.6 * MIB, 10 * MIB, 20 * MIB, 1 * MIB]
    assert fixed_buckets(sizes) == [[0, 1], [2, 3], [4]]
    assert fixed_buckets(sizes, cap_bytes=1e12, first_cap_bytes=1e12) == [[0, 1, 2, 3, 4]]
    assert fixed_buckets([]) == []
