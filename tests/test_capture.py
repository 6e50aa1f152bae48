"""Header captures of the PS's port: reading pcap files and the joins they show."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from sgdsim.testbed.capture import (
    Packets,
    bursts,
    join_gains,
    join_lags,
    join_losses,
    join_records,
    read_pcap,
    saturated_rate,
    start_deficits,
    start_excess,
    step_boundaries,
    trace_packets,
    transfer_gap_s,
    two_way_shares,
)


def frame(src: int, dst: int, payload: int, proto: int = 6, ethertype: bytes = b"\x08\x00"):
    """An Ethernet/IPv4 frame from 10.0.0.src to 10.0.0.dst, headers only (snapped)."""
    ip = struct.pack(
        ">BBHHHBBH4s4s", 0x45, 0, 20 + 32 + payload, 0, 0, 64, proto, 0,
        bytes([10, 0, 0, src]), bytes([10, 0, 0, dst]),
    )  # fmt: skip
    tcp = struct.pack(">HHIIBBHHH", 5000, 6000, 0, 0, 8 << 4, 0x18, 0, 0, 0) + b"\x00" * 12
    return b"\x00" * 12 + ethertype + ip + tcp


def pcap(records: list[tuple[float, bytes]], cut_last: bool = False) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, 1)
    for t, pkt in records:
        out += struct.pack("<IIII", int(t), round((t % 1) * 1e6), len(pkt), len(pkt) + 1000)
        out += pkt
    return out[:-10] if cut_last else out


def test_pcap_reader_keeps_tcp_segments_with_payload(tmp_path):
    path = tmp_path / "c.pcap"
    path.write_bytes(
        pcap(
            [
                (1.25, frame(2, 1, 9000)),
                (1.5, frame(1, 2, 0)),  # a bare ACK
                (1.75, frame(3, 1, 500, proto=17)),  # UDP
                (2.0, frame(1, 3, 100, ethertype=b"\x08\x06")),  # not IPv4
                (2.5, frame(1, 3, 1448)),
                (3.0, frame(1, 2, 7)),  # cut short by the capture's stop
            ],
            cut_last=True,
        )
    )
    p = read_pcap(path)
    assert p.t.tolist() == pytest.approx([1.25, 2.5])
    assert (p.src.tolist(), p.dst.tolist(), p.payload.tolist()) == ([2, 1], [1, 3], [9000, 1448])
    (tmp_path / "x").write_bytes(b"not a capture at all, just text")
    with pytest.raises(ValueError, match="not a pcap"):
        read_pcap(tmp_path / "x")


def test_bursts_split_a_flow_at_its_pauses_and_drop_small_ones():
    t = np.array([0.0, 0.001, 0.002, 0.5, 0.501, 0.9])
    size = np.array([400, 400, 400, 100, 100, 2000])
    got = bursts(t, size, gap_s=0.02, min_bytes=1000)
    assert got.tolist() == [[0.0, 0.002], [0.9, 0.9]]  # 200 bytes at 0.5 are no transfer
    assert bursts(t[:0], size[:0], 0.02, 1).shape == (0, 2)


def slotted(
    starts: dict[int, float], late_s: float, packets: int = 1000, idle: bool = False
) -> Packets:
    """Pushes of 1000-byte packets, one per ms: worker ``w`` starts at ``starts[w]``
    with ``packets`` packets; the workers sending share the slots in turn, except that
    the last to start gets one slot in ten for ``late_s`` after its start (a slow start).
    With ``idle`` (two workers) the other keeps only its half of the slots then, and
    four in ten stay empty (a joiner with nothing to send yet: the link is not full)."""
    left = dict.fromkeys(starts, packets)
    joiner = max(starts, key=starts.__getitem__)
    rows, turn, slot = [], 0, 0
    while any(left.values()):
        t = slot * 0.001
        on = [w for w in sorted(starts) if left[w] and starts[w] <= t + 1e-9]
        if on:
            if joiner in on and t < starts[joiner] + late_s - 1e-9:
                rest = [w for w in on if w != joiner] or on
                w = joiner if slot % 10 == 0 else rest[turn % len(rest)]
                if idle and slot % 10 and slot % 2 == 0:
                    # the joiner's share past its one slot in ten stays empty
                    slot += 1
                    continue
            else:
                w = on[turn % len(on)]
            turn += 1
            rows.append((t, w, 1000))
            left[w] -= 1
        slot += 1
    a = np.array(rows)
    n = len(a)
    return Packets(a[:, 0], a[:, 1].astype(int), np.ones(n, dtype=int), a[:, 2].astype(int))


def test_a_joiner_that_gets_its_share_late_shows_that_delay():
    for late in (0.0, 0.03, 0.1):
        got = join_losses(slotted({2: 0.0, 3: 0.4}, late), 1, [2, 3], "push", min_bytes=100_000)
        # the leader got 9/10 of the link for `late`, the joiner 1/10
        assert list(got) == [1] and len(got[1]) == 1
        assert got[1][0] == pytest.approx(0.8 * late, abs=0.003)
        # joining two: each of them got 9/20 of the link, the joiner 1/10, so that
        # 2 (9/20 - 1/10) late = 0.7 late; the second worker joined one, on time
        got = join_losses(slotted({2: 0.0, 3: 0.2, 4: 0.4}, late), 1, [2, 3, 4], "push", 100_000)
        assert list(got) == [1, 2] and len(got[1]) == len(got[2]) == 1
        assert got[1][0] == pytest.approx(0.0, abs=0.003)
        assert got[2][0] == pytest.approx(0.7 * late, abs=0.004)
    # no pulls in it; a window shorter than asked for is not counted
    assert join_losses(slotted({2: 0.0, 3: 0.4}, 0.05), 1, [2, 3], "pull", 100_000) == {}
    short = join_losses(
        slotted({2: 0.0, 3: 0.4}, 0.05), 1, [2, 3], "push", 100_000, min_overlap_s=2.0
    )
    assert short == {}
    with pytest.raises(ValueError, match="direction"):
        join_losses(slotted({2: 0.0, 3: 0.1}, 0.0), 1, [2, 3], "both", 1.0)


def test_join_records_pair_each_joins_lateness_with_its_overlap():
    for late in (0.0, 0.1):
        # the leader sent 400 of its 1000 packets alone, then 9/10 of the link for
        # `late` and half after: its last packet (1 ms slots) (600 - 900 late) / 500 s
        # after the one it sent at late; the window starts at the joiner's first packet
        packets = slotted({2: 0.0, 3: 0.4}, late)
        got = join_records(packets, 1, [2, 3], "push", 100_000)
        assert list(got) == [1] and len(got[1]) == 1
        lateness, window = got[1][0]
        assert lateness == join_losses(packets, 1, [2, 3], "push", 100_000)[1][0]
        assert window == pytest.approx(1.2 - 0.8 * late, abs=0.004)
    # three workers: the second joins one until the third starts (0.2 s), the third joins two
    three = join_records(slotted({2: 0.0, 3: 0.2, 4: 0.4}, 0.0), 1, [2, 3, 4], "push", 100_000)
    assert list(three) == [1, 2] and three[1][0][1] == pytest.approx(0.2, abs=0.003)
    assert join_records(packets, 1, [2, 3], "pull", 100_000) == {}
    assert join_records(packets, 1, [2, 3], "push", 100_000, min_overlap_s=2.0) == {}
    with pytest.raises(ValueError, match="direction"):
        join_records(packets, 1, [2, 3], "both", 1.0)


def test_join_lags_tell_how_much_further_behind_a_joiner_ended_than_it_started():
    for late in (0.0, 0.03, 0.1):
        # the leader sent 400 of its 1000 packets alone, then 9/10 of the link for
        # `late`: it ends 0.8 late before its fair end, the joiner at the same time as
        # with fair shares (the link stays full), so the lag grew by 0.8 late
        got = join_lags(slotted({2: 0.0, 3: 0.4}, late), 1, [2, 3], "push", 100_000)
        assert list(got) == [1] and len(got[1]) == 1
        growth, lag = got[1][0]
        assert growth == pytest.approx(0.8 * late, abs=0.003)
        assert lag == pytest.approx(0.4, abs=0.002)
    # three in turn, on time: the third joins two, 0.4 and 0.2 s after their starts;
    # the first ends at 2.5 s, the second at 2.9, the third at 3.0, so it fell 0.1 s
    # further behind the first and caught up 0.1 s on the second
    three = join_lags(slotted({2: 0.0, 3: 0.2, 4: 0.4}, 0.0), 1, [2, 3, 4], "push", 100_000)
    assert list(three) == [1, 2]
    assert three[2][0] == pytest.approx((0.0, 0.3), abs=0.003)
    assert three[1][0][1] == pytest.approx(0.2, abs=0.002)
    assert join_lags(slotted({2: 0.0, 3: 0.4}, 0.0), 1, [2, 3], "pull", 100_000) == {}
    with pytest.raises(ValueError, match="direction"):
        join_lags(slotted({2: 0.0, 3: 0.1}, 0.0), 1, [2, 3], "both", 1.0)


def test_join_gains_count_what_the_incumbents_got_beyond_a_full_links_fair_share():
    rate = 1e6  # one 1000-byte packet per ms
    for late in (0.0, 0.03, 0.1):
        # the link stays full: the leader got 9/10 of it for `late`, so the gain is the
        # lateness of join_losses, 2 (9/10 - 1/2) late = 0.8 late
        full = slotted({2: 0.0, 3: 0.4}, late)
        got = join_gains(full, 1, [2, 3], "push", 100_000, rate)
        assert list(got) == [1] and got[1][0] == pytest.approx(0.8 * late, abs=0.003)
        # the joiner had nothing to send yet and the leader kept its half: the joiner
        # is late, (1/2 - 1/10) late = 0.4 late, but the leader gained nothing
        empty = slotted({2: 0.0, 3: 0.4}, late, idle=True)
        lost = join_losses(empty, 1, [2, 3], "push", 100_000)[1][0]
        got = join_gains(empty, 1, [2, 3], "push", 100_000, rate)
        assert got[1][0] == pytest.approx(0.0, abs=0.003)
        assert lost == pytest.approx(0.4 * late, abs=0.003)
    with pytest.raises(ValueError, match="rate_Bps"):
        join_gains(full, 1, [2, 3], "push", 100_000, 0.0)


def test_saturated_rate_is_a_lone_pulls_bulk_rate():
    alone = slotted({2: 0.0}, 0.0)  # 1000 packets of 1000 bytes, one per ms, as pulls
    pulls = Packets(alone.t, np.ones_like(alone.src), alone.src, alone.payload)
    assert saturated_rate(pulls, 1, [2], 100_000) == pytest.approx(1e6, rel=0.01)
    # two pulls that overlap are not lone ones, nor a pull beside a push; pushes
    # are not pulls
    both = slotted({2: 0.0, 3: 0.1}, 0.0)
    assert saturated_rate(Packets(both.t, both.dst, both.src, both.payload), 1, [2, 3], 1) is None
    assert saturated_rate(alone, 1, [2], 100_000) is None
    push = slotted({3: 0.5}, 0.0)  # worker 3 pushes from 0.5 s on
    cols = [np.r_[getattr(pulls, f), getattr(push, f)] for f in ("t", "src", "dst", "payload")]
    order = np.argsort(cols[0], kind="stable")
    beside = Packets(*(c[order] for c in cols))
    assert saturated_rate(beside, 1, [2, 3], 100_000) is None
    # a worker's pulls of steps 15 ms apart read as one transfer holding the pause;
    # capped at a pull's bytes and a half, only the lone pull counts
    t = np.r_[np.arange(20), 34 + np.arange(20), 1000 + np.arange(20)] * 0.001
    ones = np.ones(len(t), dtype=alone.src.dtype)
    steps = Packets(t, ones, 2 * ones, np.full(len(t), 1000, dtype=alone.payload.dtype))
    assert saturated_rate(steps, 1, [2], 10_000) < 0.9e6  # the median of 0.7e6 and 1e6
    assert saturated_rate(steps, 1, [2], 10_000, max_bytes=30_000) == pytest.approx(1e6, rel=0.01)


def test_start_excess_separates_a_joins_cost_from_the_transfers_own_start():
    rate = 1e6  # one 1000-byte packet per ms
    for late in (0.0, 0.03, 0.1):
        got = start_excess(slotted({2: 0.0, 3: 0.4}, late), 1, [2, 3], "push", 100_000, rate)
        # the leader starts alone at the link's rate; the joiner's first 50 packets
        # take `late` at 1/10 of the link, the rest at half of it: 0.8 late over its share
        assert list(got) == [0, 1] and len(got[0]) == len(got[1]) == 1
        assert got[0][0] == pytest.approx(0.0, abs=0.002)
        assert got[1][0] - got[0][0] == pytest.approx(0.8 * late, abs=0.003)
        # the third worker joins two: 1/10 for `late`, then a third of the link
        three = start_excess(
            slotted({2: 0.0, 3: 0.2, 4: 0.4}, late), 1, [2, 3, 4], "push", 1e5, rate
        )
        assert sorted(three) == [0, 1, 2]
        assert three[2][0] == pytest.approx(0.7 * late, abs=0.004)
    # a start that another transfer overlaps only in part is not counted
    partly = start_excess(slotted({2: 0.0, 3: 0.02}, 0.0), 1, [2, 3], "push", 100_000, rate)
    assert partly == {1: [pytest.approx(0.0, abs=0.003)]}  # the leader's is not counted
    with pytest.raises(ValueError, match="rate_Bps"):
        start_excess(slotted({2: 0.0}, 0.0), 1, [2], "push", 1.0, 0.0)


def test_start_deficits_charge_a_joiner_its_shortfall_from_a_fair_share():
    rate = 1e6  # one 1000-byte packet per ms; half a step is 100 packets: a window of 0.1 s
    for late in (0.0, 0.03, 0.1):
        got = start_deficits(
            slotted({2: 0.0, 3: 0.4}, late), 1, [2, 3], "push", 100_000, rate, big_bytes=500
        )
        # the leader alone fills the link; the joiner has 1/10 of it for `late`, then
        # half: (1/2 - 1/10) * late short of its share over its first 0.1 s
        assert got == {
            0: [pytest.approx(0.0, abs=0.0015)],
            1: [pytest.approx(0.4 * late, abs=0.0015)],
        }
        three = start_deficits(
            slotted({2: 0.0, 3: 0.2, 4: 0.4}, late), 1, [2, 3, 4], "push", 1e5, rate, 500
        )
        # the second joins one at its share; the third joins two: (1/3 - 1/10) * late
        assert three[1] == [pytest.approx(0.0, abs=0.0015)]
        assert three[2] == [pytest.approx(late * (1 / 3 - 1 / 10), abs=0.0015)]
    # a lone start at half the link for 50 ms is 25 ms short of the link
    t = np.r_[np.arange(25) * 0.002, 0.05 + np.arange(200) * 0.001]
    lone = Packets(t, np.full(len(t), 2), np.ones(len(t), dtype=int), np.full(len(t), 1000))
    assert start_deficits(lone, 1, [2], "push", 100_000, rate, 500) == {
        0: [pytest.approx(0.025, abs=0.0015)]
    }
    # a joiner whose incumbent started 20 ms before it, still in its own start, is not
    # counted; nor are packets of 1000 bytes or less (the default's data packets are larger)
    close = slotted({2: 0.0, 3: 0.02}, 0.0)
    assert 1 not in start_deficits(close, 1, [2, 3], "push", 1e5, rate, 500)
    assert start_deficits(lone, 1, [2], "push", 100_000, rate) == {}
    with pytest.raises(ValueError, match="rate_Bps"):
        start_deficits(lone, 1, [2], "push", 1.0, 0.0)


def test_a_simulated_trace_reads_as_a_capture_of_the_same_bytes():
    trace = [
        ("pull", 0, 1, 0.0, 0.1),
        ("compute", 0, 0, 0.1, 0.2),
        ("push", 1, 0, 0.2, 0.3),
        ("push", 0, 0, 0.25, 0.25),  # delivered at once
    ]
    p = trace_packets(trace, [10.0, 20_000.0], [9000.0], packet_bytes=8000.0)
    # 20 kB in 3 packets over the pull; 9 kB in 2 per push; the PS is .1, worker i is .i+2
    assert p.payload.sum() == 20_000 + 2 * 9000
    assert np.all(np.diff(p.t) >= 0) and p.t.min() > 0.0 and p.t.max() == 0.3
    down = (p.src == 1) & (p.dst == 2)
    assert down.sum() == 3 and p.t[down][-1] == pytest.approx(0.1)
    assert ((p.src == 3) & (p.dst == 1)).sum() == 2 and ((p.src == 2) & (p.dst == 1)).sum() == 2
    assert len(trace_packets([], [1.0], [1.0]).t) == 0


def test_the_simulators_joiner_starts_short_only_when_backprop_paces_its_push():
    from sgdsim.simulation import Workload
    from sgdsim.testbed.calibrate import simulated_start_deficits

    def workload(pieces: int) -> Workload:
        # 2 MB pulled and pushed at 10 MB/s (0.2 s each way); the push in `pieces`
        # tensors, one after each of `pieces` backward segments of 0.3 s in all
        seg = np.r_[0.1, np.full(pieces, 0.3 / pieces)]
        return Workload(
            seg_dur_s=seg,
            pull_bytes=np.array([2e6]),
            pull_gate=np.array([0]),
            push_bytes=np.full(pieces, 2e6 / pieces),
            push_seg=np.arange(1, pieces + 1),
            push_update_s=np.zeros(pieces),
        )

    at_once = simulated_start_deficits(workload(1), 1e7, 2, runs=4, steps=12)
    paced = simulated_start_deficits(workload(40), 1e7, 2, runs=4, steps=12)
    # one tensor ready at once: fair from its first byte, alone or joining
    ones = [x for k in (0, 1) for x in at_once["push"].get(k, ())]
    assert ones and max(abs(x) for x in ones) < 0.003
    # 40 tensors made at 6.7 MB/s: a lone start leaves a third of the link idle
    assert np.median(paced["push"][0]) > 0.02
    assert set(paced) == {"push", "pull"}
    with pytest.raises(ValueError, match="workers >= 2"):
        simulated_start_deficits(workload(1), 1e7, 1)


def test_step_boundary_runs_from_the_last_push_packet_to_the_pulls_bulk():
    def flow(t0: float, src: int, dst: int) -> list[tuple[float, int, int, int]]:
        return [(t0 + i * 0.001, src, dst, 1448) for i in range(350)]  # 0.5 MB in 0.35 s

    # worker 2: pull, push ending at 0.849 s, the PS's small requests for the
    # push's last gradients, then the next pull's bulk at 0.855 s and its push
    rows = flow(0.0, 1, 2) + flow(0.5, 2, 1) + [(0.845, 1, 2, 90), (0.848, 1, 2, 90)]
    rows += flow(0.855, 1, 2) + flow(1.4, 2, 1)
    a = np.array(sorted(rows))
    p = Packets(a[:, 0], a[:, 1].astype(int), a[:, 2].astype(int), a[:, 3].astype(int))
    assert bursts(a[a[:, 1] == 1, 0], a[a[:, 1] == 1, 3], 0.02, 250_000)[1, 0] == 0.845
    assert step_boundaries(p, 1, [2], pull_bytes=500_000) == [pytest.approx(0.006)]
    assert step_boundaries(p, 1, [3], pull_bytes=500_000) == []


def test_join_delays_count_every_join_and_fill_a_k_without_any_from_the_nearest():
    from sgdsim.testbed.calibrate import join_delay_of

    ones = [0.01, 0.02, 0.03, 0.04, 0.05]
    got = join_delay_of({1: ones, 2: [0.2, 0.3], 3: [-0.1] * 6}, workers=5)
    # k = 2's two joins are its own; k = 3's mean is clipped at 0; k = 4 none: k = 3's
    assert got.mean_s == pytest.approx((0.03, 0.25, 0.0, 0.0))
    assert got.sd_s == pytest.approx((np.std(ones), 0.05, 0.0, 0.0))
    assert join_delay_of({}, workers=2).mean_s == (0.0,)
    # a k without joins takes the nearest k's, the smaller on a tie
    assert join_delay_of({1: [0.01], 3: [0.03]}, workers=4).mean_s == pytest.approx(
        (0.01, 0.01, 0.03)
    )
    # signed (a FIFO's): the joins themselves, filled the same way, unclipped
    signed = join_delay_of({1: ones, 2: [0.2, 0.3], 3: [-0.1] * 6}, workers=5, signed=True)
    assert signed.joins_s == (tuple(ones), (0.2, 0.3), (-0.1,) * 6, (-0.1,) * 6)
    assert signed.mean_s == pytest.approx((0.03, 0.25, -0.1, -0.1))
    # k = 1 without joins takes k = 2's, not 0: joining is not free because it was rare
    assert join_delay_of({2: ones}, workers=3, signed=True).joins_s == (tuple(ones),) * 2


def test_captures_of_one_n_pool_their_joins_in_order_and_average_their_rates():
    from sgdsim.testbed.calibrate import TrainingJoins, join_delay_of, pool_joins

    def capture(push, rate, share, boundary, lag):
        delay = join_delay_of(push, 3)
        return TrainingJoins(
            delay, delay, push, {1: (0.005,)}, rate, 3, boundary_s=boundary,
            two_way_share=share, phase_distance=rate / 10, lag_s={"push": {1: lag}},
            window_s={"push": {k: (0.1,) * len(v) for k, v in push.items()}},
        )  # fmt: skip

    a = capture({1: (0.01, 0.03)}, 1.0, (0.9, 0.8), 0.002, ((0.004, 0.1),))
    b = capture({1: (0.05,), 2: (0.2,)}, 2.0, None, None, ((-0.002, 0.3),))
    c = capture({2: (-0.1,)}, 3.0, (0.7, 0.6), 0.006, ())
    got = pool_joins([a, b, c])
    # every join of every capture, per k in the captures' order; the delays drawn again
    assert got.push_growth_s == {1: (0.01, 0.03, 0.05), 2: (0.2, -0.1)}
    assert got.pull_growth_s == {1: (0.005,) * 3}
    assert got.push.mean_s == pytest.approx((0.03, 0.05))  # k = 2: 0.05, not clipped
    assert got.push.sd_s == pytest.approx((np.std([0.01, 0.03, 0.05]), 0.15))
    assert got.window_s == {"push": {1: (0.1,) * 3, 2: (0.1,) * 2}}
    assert got.lag_s == {"push": {1: ((0.004, 0.1), (-0.002, 0.3))}}
    # rates, shares and phases averaged over the captures that have them
    assert (got.steps_per_s, got.workers) == (pytest.approx(2.0), 3)
    assert got.two_way_share == pytest.approx((0.8, 0.7))
    assert got.phase_distance == pytest.approx(0.2)
    assert got.boundary_s == pytest.approx(0.004)
    assert got.saturated_Bps is None and got.two_way_share_past_start is None
    # a FIFO's pooled joins are drawn themselves, sign included
    assert pool_joins([a, b, c], signed=True).push.joins_s == (
        (0.01, 0.03, 0.05),
        (0.2, -0.1),
    )
    assert pool_joins([a]).push_growth_s == a.push_growth_s
    with pytest.raises(ValueError, match="at least one"):
        pool_joins([])
    two = TrainingJoins(a.push, a.pull, {}, {}, 1.0, 2)
    with pytest.raises(ValueError, match=r"different numbers of workers: \[2, 3\]"):
        pool_joins([a, two])


def two_way(start_s: float = 0.0) -> Packets:
    """One packet per ms (times mid-bin): a pull (PS .1 to worker .2) alone from 0 to
    0.5 s at 1000 B/ms, beside a push (worker .3 to the PS) from 0.5 to 1 s at 800 B/ms
    while the push gets 700, then the push alone to 1.5 s at 1000 B/ms; for the push's
    first ``start_s`` beside the pull, the pull 1000 and the push 300 (TCP's start)."""
    rows = []
    for i in range(1500):
        t = i * 0.001 + 0.0005
        if t < 0.5:
            rows.append((t, 1, 2, 1000))
        elif t < 1.0:
            start = t < 0.5 + start_s
            rows += [(t, 1, 2, 1000 if start else 800), (t, 3, 1, 300 if start else 700)]
        else:
            rows.append((t, 3, 1, 1000))
    rows += [(0.2 + i * 0.001, 3, 1, 50) for i in range(10)]  # a small RPC: no transfer
    rows.sort()
    a = np.array(rows)
    return Packets(a[:, 0], a[:, 1].astype(int), a[:, 2].astype(int), a[:, 3].astype(int))


def test_two_way_shares_compare_each_direction_beside_the_other_with_it_alone():
    p = two_way()
    got = two_way_shares(p, 1, [2, 3], pull_bytes=1e6, push_bytes=1e6)
    assert got == pytest.approx((0.8, 0.7), abs=0.01)
    # the push starting at 0.95 s: 50 ms beside the pull, too little to tell
    late = (p.src != 3) | (p.t < 0.5) | (p.t >= 0.95)
    q = Packets(p.t[late], p.src[late], p.dst[late], p.payload[late])
    assert two_way_shares(q, 1, [2, 3], 1e6, 1e6, min_s=0.04) is not None
    assert two_way_shares(q, 1, [2, 3], 1e6, 1e6, min_s=0.06) is None
    with pytest.raises(ValueError, match="bytes"):
        two_way_shares(p, 1, [2, 3], 0.0, 1e6)
    with pytest.raises(ValueError, match="ramp_s"):
        two_way_shares(p, 1, [2, 3], 1e6, 1e6, ramp_s=-0.1)


def test_two_way_shares_past_each_transfers_start_leave_tcps_start_out():
    p = two_way(start_s=0.1)
    # counted in: (0.1 * 1000 + 0.4 * 800) / 0.5 and (0.1 * 300 + 0.4 * 700) / 0.5
    assert two_way_shares(p, 1, [2, 3], 1e6, 1e6) == pytest.approx((0.84, 0.62), abs=0.01)
    assert two_way_shares(p, 1, [2, 3], 1e6, 1e6, ramp_s=0.1) == pytest.approx((0.8, 0.7), abs=0.01)


def test_transfer_gap_splits_steps_that_follow_within_20_ms():
    # LeNet5 at 200 Mbit/s: 248 KB each way, 25 MB/s: half a push is 5 ms
    assert transfer_gap_s(248e3, 248e3, 25e6) == pytest.approx(0.00496)
    assert transfer_gap_s(14e6, 14e6, 12.5e6) == 0.02  # MobileNetV2: the 20 ms
    assert transfer_gap_s(14e6, 14e6, 12.5e6, longest_s=0.05) == 0.05
    with pytest.raises(ValueError, match="> 0"):
        transfer_gap_s(248e3, 0.0, 25e6)
    # one worker's pulls of 10 ms, 15 ms apart (its push between): one transfer per
    # step with the gap, one for all with 20 ms
    t = np.concatenate([k * 0.025 + np.arange(10) * 0.001 for k in range(8)])
    ones = np.ones(len(t), dtype=np.int64)
    pulls = Packets(t, ones, 2 * ones, np.full(len(t), 25_000, dtype=np.int64))
    gap = transfer_gap_s(250e3, 250e3, 25e6)
    assert len(bursts(pulls.t, pulls.payload, gap, 125e3)) == 8
    assert len(bursts(pulls.t, pulls.payload, 0.02, 125e3)) == 1
