"""Per-tensor wire timelines (sgdsim.testbed.wire) on captures built packet by packet.

A whole-packet capture of real training (two LeNet5 workers through a FIFO at
MTU 1500, the test machine busy with them) lost packets at the niced tcpdump in
two of three runs, cutting connections short, so no test here depends on
one; the RecvTensor framing below is TensorFlow 2.21's as read from such captures
(docs/validation.md, "Per-tensor wire timelines").
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sgdsim.testbed.wire import recv_tensor_request, tensor_timeline

PS, W0 = "10.0.0.1", "10.0.0.2"
PULL_KEY = (
    "/job:ps/replica:0/task:0/device:CPU:0;0123abcd;"
    "/job:worker/replica:0/task:0/device:CPU:0;edge_7_conv1/kernel/read;0:0"
)
PUSH_KEY = (
    "/job:worker/replica:0/task:1/device:CPU:0;0123abcd;"
    "/job:ps/replica:0/task:0/device:CPU:0;edge_9_gradients/conv1/grad;0:0"
)


def varint(x: int) -> bytes:
    x %= 2**64  # int64 as protobuf writes it: two's complement, ten bytes when negative
    out = bytearray()
    while x >= 0x80:
        out.append(x & 0x7F | 0x80)
        x >>= 7
    return bytes(out + bytes([x]))


def grpc_request(step_id: int, key: str) -> bytes:
    """A RecvTensorRequest (worker.proto: 1 step_id, 2 rendezvous_key, 3 dma_ok) in
    protobuf's wire format, in gRPC's length-prefixed frame. (TensorFlow's pip wheel
    ships no worker_pb2; the steady measurement's test reads real ones.)"""
    k = key.encode()
    body = b"\x08" + varint(step_id) + b"\x12" + varint(len(k)) + k + b"\x18\x01"
    return b"\x00" + len(body).to_bytes(4, "big") + body


def h2_frame(kind: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, 0]) + stream.to_bytes(4, "big") + payload


def packet(t: float, src: str, sport: int, dst: str, dport: int, seq: int, flags: int, pay: bytes):
    ip_src, ip_dst = (bytes(int(x) for x in a.split(".")) for a in (src, dst))
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, 0, 5 << 4, flags, 65535, 0, 0) + pay
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, ip_src, ip_dst)
    frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp
    return t, frame


def write_pcap(path: Path, packets: list[tuple[float, bytes]], snaplen: int = 0) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)]
    for t, frame in packets:
        kept = frame[:snaplen] if snaplen else frame
        sec, usec = int(t), round((t - int(t)) * 1e6)
        out.append(struct.pack("<IIII", sec, usec, len(kept), len(frame)) + kept)
    path.write_bytes(b"".join(out))


def test_a_recv_tensor_request_gives_its_step_and_rendezvous_key():
    assert recv_tensor_request(grpc_request(42, PULL_KEY)) == (42, PULL_KEY)
    # TensorFlow's step ids are int64: negative ones come back negative
    assert recv_tensor_request(grpc_request(-5, PULL_KEY)) == (-5, PULL_KEY)
    assert recv_tensor_request(grpc_request(1, "not a rendezvous key")) is None
    assert recv_tensor_request(b"\x00\x00\x00\x00\x03\x08\x96") is None  # cut short
    assert recv_tensor_request(b"") is None


def test_a_pull_and_a_push_are_timed_by_their_first_and_last_bytes(tmp_path: Path):
    syn, ack, psh = 0x02, 0x10, 0x18
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    pull_req = preface + h2_frame(0, 1, grpc_request(7, PULL_KEY))
    tensor = bytes(range(256)) * 40  # 10,240 bytes, sent as two DATA frames of one stream
    pull_resp = b"".join(
        [h2_frame(1, 1, b"hdrs"), h2_frame(0, 1, tensor[:6000]), h2_frame(0, 1, tensor[6000:])]
    )
    push_req = preface + h2_frame(0, 3, grpc_request(8, PUSH_KEY))
    push_resp = h2_frame(0, 3, b"g" * 3000)
    a, b, c = pull_resp[:5000], pull_resp[5000:9000], pull_resp[9000:]
    pkts = [
        # the worker opens a connection to the PS (pulls), the PS one to worker 1 (pushes)
        packet(1.000, W0, 40000, PS, 2222, 99, syn, b""),
        packet(1.001, PS, 2222, W0, 40000, 499, syn | ack, b""),
        packet(1.010, W0, 40000, PS, 2222, 100, psh, pull_req),
        packet(1.020, PS, 2222, W0, 40000, 500, psh, a),
        packet(1.040, PS, 2222, W0, 40000, 500 + 9000, psh, c),  # arrives before the middle
        packet(1.030, PS, 2222, W0, 40000, 500 + 5000, psh, b),
        packet(1.050, PS, 2222, W0, 40000, 500 + 5000, psh, b),  # resent: the first copy counts
        packet(1.060, PS, 2222, W0, 40000, 500 + 4000, psh, pull_resp[4000:5000]),  # and again
        packet(2.000, PS, 50000, W0, 3333, 9, syn, b""),
        packet(2.001, W0, 3333, PS, 50000, 19, syn | ack, b""),
        packet(2.010, PS, 50000, W0, 3333, 10, psh, push_req),
        packet(2.030, W0, 3333, PS, 50000, 20, psh, push_resp),
    ]
    write_pcap(tmp_path / "c.pcap", sorted(pkts))
    wire = tensor_timeline(tmp_path / "c.pcap")
    assert wire.cut_short == []
    pull, push = wire.tensors.to_dicts()
    assert pull == {
        "direction": "pull",
        "worker": 0,
        "step_id": 7,
        "tensor": "edge_7_conv1/kernel/read",
        "bytes": len(tensor),
        "request_s": pytest.approx(1.010),
        "first_s": pytest.approx(1.020),  # the first DATA frame starts in segment a
        "last_s": pytest.approx(1.040),  # and the last one ends in segment c
    }
    assert push["direction"] == "push" and push["worker"] == 1 and push["step_id"] == 8
    assert push["bytes"] == 3000 and push["tensor"] == "edge_9_gradients/conv1/grad"
    assert (push["request_s"], push["first_s"], push["last_s"]) == pytest.approx(
        (2.010, 2.030, 2.030)
    )

    # a packet the capture missed cuts its connection there, and says so
    write_pcap(tmp_path / "gap.pcap", sorted(p for p in pkts if p[0] not in (1.030, 1.050)))
    wire = tensor_timeline(tmp_path / "gap.pcap")
    assert wire.cut_short == [f"{PS}:2222 -> {W0}:40000"]
    assert wire.tensors["direction"].to_list() == ["push"]

    # a capture of headers only cannot be read for tensors, and says how to take one
    write_pcap(tmp_path / "hdr.pcap", sorted(pkts), snaplen=96)
    with pytest.raises(ValueError, match="payload=True"):
        tensor_timeline(tmp_path / "hdr.pcap")


def test_the_wire_command_summarizes_a_capture_and_keeps_its_rows(tmp_path: Path):
    import polars as pl
    from click.testing import CliRunner

    from sgdsim.cli import main

    syn, ack, psh = 0x02, 0x10, 0x18
    req = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(0, 1, grpc_request(3, PULL_KEY))
    pkts = [
        packet(1.0, W0, 40000, PS, 2222, 99, syn, b""),
        packet(1.001, PS, 2222, W0, 40000, 499, syn | ack, b""),
        packet(1.01, W0, 40000, PS, 2222, 100, psh, req),
        packet(1.02, PS, 2222, W0, 40000, 500, psh, h2_frame(0, 1, b"x" * 2_000_000)[:1400]),
    ]
    write_pcap(tmp_path / "c.pcap", pkts)
    # the tensor's frame is cut short by the end of the capture: nothing to report
    r = CliRunner().invoke(main, ["wire", str(tmp_path / "c.pcap")])
    assert r.exit_code == 1 and "no RecvTensor calls" in r.output
    pkts[-1] = packet(1.02, PS, 2222, W0, 40000, 500, psh, h2_frame(0, 1, b"x" * 1200))
    write_pcap(tmp_path / "c.pcap", pkts)
    out = tmp_path / "t.parquet"
    r = CliRunner().invoke(main, ["wire", str(tmp_path / "c.pcap"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "| 0 | pull | 1 | 1 | 0.001 | 0.000 |" in r.output
    assert pl.read_parquet(out)["bytes"].to_list() == [1200]
    write_pcap(tmp_path / "h.pcap", pkts, snaplen=96)
    r = CliRunner().invoke(main, ["wire", str(tmp_path / "h.pcap")])
    assert r.exit_code == 1 and "payload=True" in r.output
