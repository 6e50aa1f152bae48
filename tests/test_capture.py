"""Header captures of the PS's port: reading pcap files and the joins they show."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from sgdsim.testbed.capture import Packets, bursts, join_losses, read_pcap


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


def two_pushes(late_s: float, third: bool = False) -> Packets:
    """Worker 2 pushes 1000 packets of 1000 bytes from t = 0, one per ms while alone;
    worker 3 starts at 0.4 s with one packet in ten for ``late_s`` (a slow start),
    then the two alternate packets; optionally worker 4 joins at 0.6 s."""
    rows, t, left, k = [], 0.0, {2: 1000, 3: 1000}, 0
    while left[2]:
        joined = t >= 0.4 - 1e-9
        turn = 3 if joined and (t >= 0.4 + late_s - 1e-9 or k % 10 == 0) and k % 2 == 0 else 2
        if joined and t < 0.4 + late_s - 1e-9:
            turn = 3 if k % 10 == 0 else 2
        rows.append((t, turn, 1000))
        left[turn] -= 1
        t += 0.001
        k += 1 if joined else 0
    while left[3]:
        rows.append((t, 3, 1000))
        left[3] -= 1
        t += 0.001
    if third:
        rows += [(0.6 + 0.002 * k, 4, 1000) for k in range(300)]
    rows.sort()
    a = np.array(rows)
    n = len(a)
    return Packets(a[:, 0], a[:, 1].astype(int), np.ones(n, dtype=int), a[:, 2].astype(int))


def test_a_joiner_that_gets_its_share_late_shows_that_delay():
    for late in (0.0, 0.03, 0.1):
        got = join_losses(two_pushes(late), 1, [2, 3], "push", min_bytes=100_000)
        assert len(got) == 1
        # the leader got 9/10 of the link for `late`, the joiner 1/10
        assert got[0] == pytest.approx(0.8 * late, abs=0.003)
    # no pulls in it; a third worker inside the window leaves the join out
    assert join_losses(two_pushes(0.05), 1, [2, 3], "pull", min_bytes=100_000) == []
    assert join_losses(two_pushes(0.05, third=True), 1, [2, 3, 4], "push", 100_000) == []
    # a window shorter than asked for is not counted
    assert join_losses(two_pushes(0.05), 1, [2, 3], "push", 100_000, min_overlap_s=2.0) == []
    with pytest.raises(ValueError, match="direction"):
        join_losses(two_pushes(0.0), 1, [2, 3], "both", 1.0)
