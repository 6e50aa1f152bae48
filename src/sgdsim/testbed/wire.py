"""Per-tensor wire timelines from a full-payload capture of the PS's port.

TensorFlow moves every tensor between a worker and the PS as one gRPC
``RecvTensor`` call over HTTP/2 (RFC 9113): the receiving task sends a
request naming the tensor by its rendezvous key
(``src_device;incarnation;dst_device;edge_name;frame:iter``), and the sending
task answers on the same HTTP/2 stream with DATA frames that carry the
tensor. A pull is a call the worker makes to the PS, a push one the PS makes to
the worker's server. :func:`tensor_timeline` reassembles each TCP connection
of a capture taken with whole packets (:meth:`~sgdsim.testbed.netns.Testbed.capture`
with ``payload=True``), splits it into HTTP/2 frames, and gives every call's
tensor, step, bytes and when its request and its first and last response
bytes crossed the port: the simulator's transfer timeline as the wire saw it
(docs/steady-state-log.md, "One tensor at a time, in a new order every step").
"""

from __future__ import annotations

import re
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from sgdsim.testbed.capture import tcp_header, tcp_records
from sgdsim.traces.parse import role_of, task_of

#: HTTP/2 client connection preface (RFC 9113, section 3.4).
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA = 0
_SYN, _ACK = 0x02, 0x10
#: ``/job:worker/replica:0/task:1/device:CPU:0;<incarnation>;/job:ps/...;edge_…;0:0``
_KEY = re.compile(r"^(/job:[^;]+);[0-9a-fA-F]+;(/job:[^;]+);([^;]+);\d+:\d+$")

#: Columns of :attr:`WireTimeline.tensors` (times in seconds of the capture's clock).
TENSOR_SCHEMA = {
    "direction": pl.Utf8,
    "worker": pl.Int32,
    "step_id": pl.Int64,
    "tensor": pl.Utf8,
    "bytes": pl.Int64,
    "request_s": pl.Float64,
    "first_s": pl.Float64,
    "last_s": pl.Float64,
}


@dataclass
class _Stream:
    """One direction of one TCP connection: its payload in order, and when each
    segment's last byte crossed the port."""

    isn: int | None = None
    syn_only: bool = False  # the SYN without ACK: this side opened the connection
    segments: dict[int, tuple[float, bytes]] = field(default_factory=dict)


@dataclass(frozen=True)
class WireTimeline:
    """What :func:`tensor_timeline` read.

    Attributes:
        tensors: one row per ``RecvTensor`` call (:data:`TENSOR_SCHEMA`):
            ``direction`` ``pull`` (PS to worker) or ``push``; ``worker`` the
            worker's task index; ``step_id`` TensorFlow's step id (one per
            worker step); ``bytes`` the response's DATA payload (the tensor
            and a few bytes of framing); ``request_s`` when the request's last
            byte, ``first_s`` / ``last_s`` when the first and the last of the
            response's segments crossed the port (seconds, ``time.time()``
            clock; a segment resent after a drop counts when it came). Sorted
            by ``first_s``.
        cut_short: connections read only up to a gap in the capture (a packet
            the capture missed), as ``address:port -> address:port``.
    """

    tensors: pl.DataFrame
    cut_short: list[str]


def _packets(path: Path) -> list[tuple[float, tuple[str, int, str, int], int, int, bytes]]:
    """(time, (src, sport, dst, dport), seq, flags, payload) of every IPv4/TCP packet."""
    out = []
    for t, pkt, orig in tcp_records(path):
        if len(pkt) < orig:
            raise ValueError(
                f"{path}: packets were captured without their payload (snap length "
                f"{len(pkt)} of {orig} bytes); capture with payload=True"
            )
        header = tcp_header(pkt)
        if header is None:
            continue
        ihl, total, tcp_len = header
        ip = pkt[14:]
        tcp = ip[ihl:total]
        sport, dport, seq = struct.unpack_from(">HHI", tcp)
        src = ".".join(str(x) for x in ip[12:16])
        dst = ".".join(str(x) for x in ip[16:20])
        out.append((t, (src, sport, dst, dport), seq, tcp[13], tcp[tcp_len:]))
    return out


def _reassemble(s: _Stream) -> tuple[bytes, np.ndarray, np.ndarray, bool]:
    """(payload in order, (k,) end offset of each segment, (k,) its time, whether a gap cut it)."""
    assert s.isn is not None
    pos, buf = s.isn, bytearray()
    ends: list[int] = []
    times: list[float] = []
    for seq in sorted(s.segments, key=lambda q: (q - s.isn) % 2**32):  # type: ignore[operator]
        t, pay = s.segments[seq]
        ahead = (seq - pos) % 2**32
        if ahead > 2**31:  # starts before what we have: a retransmission overlapping it
            behind = (pos - seq) % 2**32
            if behind >= len(pay):
                continue
            pay, ahead = pay[behind:], 0
        if ahead:
            return bytes(buf), np.asarray(ends), np.asarray(times), True
        buf += pay
        pos = (pos + len(pay)) % 2**32
        ends.append(len(buf))
        times.append(t)
    return bytes(buf), np.asarray(ends), np.asarray(times), False


def _frames(
    buf: bytes, ends: np.ndarray, times: np.ndarray
) -> list[tuple[int, int, float, float, bytes]]:
    """(type, stream id, earliest and latest time of its segments, payload) of each
    whole HTTP/2 frame."""
    i = len(_PREFACE) if buf.startswith(_PREFACE) else 0
    out = []
    while i + 9 <= len(buf):
        length = int.from_bytes(buf[i : i + 3], "big")
        kind, sid = buf[i + 3], int.from_bytes(buf[i + 5 : i + 9], "big") & 0x7FFFFFFF
        if i + 9 + length > len(buf):
            break
        # the segments holding the frame; a resent one may have come after later ones
        seg = times[np.searchsorted(ends, i + 1) : np.searchsorted(ends, i + 9 + length) + 1]
        first, last = float(seg.min()), float(seg.max())
        out.append((kind, sid, first, last, buf[i + 9 : i + 9 + length]))
        i += 9 + length
    return out


def _varint(b: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        x = b[i]
        value |= (x & 0x7F) << shift
        i += 1
        if x < 0x80:
            return value, i
        shift += 7


def recv_tensor_request(message: bytes) -> tuple[int, str] | None:
    """(step id, rendezvous key) of one gRPC message holding a ``RecvTensorRequest``.

    The message is gRPC's length-prefixed frame (1 byte compressed flag, 4 bytes
    length) of the protobuf ``tensorflow.RecvTensorRequest``
    (``tensorflow/core/protobuf/worker.proto``: field 1 ``step_id``, field 2
    ``rendezvous_key``). None for any other message.
    """
    if len(message) < 5 or message[0] != 0:
        return None
    body = message[5 : 5 + int.from_bytes(message[1:5], "big")]
    step: int | None = None
    key: str | None = None
    i = 0
    try:
        while i < len(body):
            tag, i = _varint(body, i)
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                value, i = _varint(body, i)
                if number == 1:
                    step = value
            elif wire == 2:
                n, i = _varint(body, i)
                if number == 2:
                    key = body[i : i + n].decode(errors="replace")
                i += n
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return None
    except ValueError:
        return None
    if step is None or key is None or not _KEY.match(key):
        return None
    return step - 2**64 if step >= 2**63 else step, key  # int64, two's complement


def tensor_timeline(path: str | Path) -> WireTimeline:
    """Every ``RecvTensor`` call in a whole-packet capture, with its wire times.

    Each TCP connection's two directions are reassembled from the SYN on
    (connections whose SYN is not in the capture are skipped); requests are
    read on the side that opened the connection, responses on the other, and
    matched by HTTP/2 stream id. Other gRPC calls (RunGraph, status) are left
    out. ``step_id`` is TensorFlow's: all tensors of one worker step share it.

    Raises:
        ValueError: not a pcap file, or its packets were captured without
            their payload.
        FileNotFoundError: no such file.
    """
    p = Path(path)
    streams: dict[tuple[str, int, str, int], _Stream] = defaultdict(_Stream)
    for t, flow, seq, flags, payload in _packets(p):
        s = streams[flow]
        if flags & _SYN:
            s.isn, s.syn_only = (seq + 1) % 2**32, not flags & _ACK
            continue
        if payload and seq not in s.segments:
            s.segments[seq] = (t, payload)
    rows: dict[str, list[object]] = {k: [] for k in TENSOR_SCHEMA}
    cut: list[str] = []
    for flow, client in streams.items():
        back = streams.get((flow[2], flow[3], flow[0], flow[1]))
        if not client.syn_only or client.isn is None or back is None or back.isn is None:
            continue
        ask, answer = _reassemble(client), _reassemble(back)
        for (src, sport, dst, dport), (*_, short) in ((flow, ask), (flow[2:] + flow[:2], answer)):
            if short:
                cut.append(f"{src}:{sport} -> {dst}:{dport}")
        # a request's message may span DATA frames: joined, timed by its last
        requests: dict[int, tuple[float, bytes]] = {}
        for kind, sid, _, last, pay in _frames(*ask[:3]):
            if kind == _DATA and pay:
                requests[sid] = (last, requests.get(sid, (0.0, b""))[1] + pay)
        data: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
        for kind, sid, first, last, pay in _frames(*answer[:3]):
            if kind == _DATA and pay and sid in requests:
                data[sid].append((first, last, len(pay)))
        for sid, (asked, message) in requests.items():
            req = recv_tensor_request(message)
            if req is None or not data.get(sid):
                continue
            step, key = req
            m = _KEY.match(key)
            assert m is not None
            src, dst, tensor = m.groups()
            pull = role_of(src) == "ps"
            task = task_of(dst if pull else src)
            frames = data[sid]
            rows["direction"].append("pull" if pull else "push")
            rows["worker"].append(-1 if task is None else task)
            rows["step_id"].append(step)
            rows["tensor"].append(tensor)
            rows["bytes"].append(sum(n for _, _, n in frames))
            rows["request_s"].append(asked)
            rows["first_s"].append(min(a for a, _, _ in frames))
            rows["last_s"].append(max(b for _, b, _ in frames))
    tensors = pl.DataFrame(rows, schema=TENSOR_SCHEMA).sort("first_s", "tensor")
    return WireTimeline(tensors, sorted(set(cut)))
