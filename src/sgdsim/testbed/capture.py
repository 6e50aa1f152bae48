"""Header captures of the PS's port on the testbed, and the joins they show.

A capture (``tcpdump`` in the testbed's bridge namespace, on the PS's port)
records when every TCP segment between the PS and a worker crossed the port,
in both directions: pulls as the PS's NIC sent them, pushes as the port
delivered them to the PS. :func:`join_losses` reads from it how much later
than a fair share a transfer that joins other workers' gets its bytes, by how
many it joins: the join delays of the simulator (:class:`sgdsim.simulation.connection.Connection`)
as real training shows it, which races of pre-made tensors understate
(docs/steady-state-log.md, "Joins in training"); :func:`start_excess` and
:func:`step_boundaries` separate a transfer's own start from what joining
costs it (docs/steady-state-log.md, "Where the simulated pair's catch-up comes
from").
"""

from __future__ import annotations

import math
import shutil
import statistics
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

#: Bytes of each packet kept: Ethernet, IPv4 and TCP headers with options.
SNAPLEN = 96
#: Kernel buffer of a whole-packet capture, KiB: 256 MiB holds ~20 s of 100 Mbit/s both ways,
#: so a niced tcpdump on a busy 2-core machine catches up instead of dropping.
PAYLOAD_BUFFER_KIB = 262144

_PCAP_MAGIC = {0xA1B2C3D4: 1e-6, 0xA1B23C4D: 1e-9}

_V = TypeVar("_V")


def tcpdump_missing() -> str | None:
    """Why a capture cannot run here (``tcpdump`` or ``timeout`` not installed), or None."""
    if shutil.which("tcpdump") is None or shutil.which("timeout") is None:
        return (
            "tcpdump is not installed (Debian: apt-get install tcpdump; `make system-deps` "
            "does it as root)"
        )
    return None


def tcpdump_argv(port: str, path: str, lifetime_s: float, payload: bool = False) -> list[str]:
    """Command that captures the TCP headers crossing ``port`` into ``path``
    (whole packets with ``payload``, for :mod:`sgdsim.testbed.wire`).

    A header capture is packet-buffered (``-U``) so that the file is whole up
    to the last packet if the capture is stopped by a signal; a whole-packet
    capture writes in blocks from a large kernel buffer instead (per-packet
    writes lost packets on a busy 2-core machine) and is flushed when
    ``tcpdump`` ends on SIGTERM or SIGINT. It ends by itself after
    ``lifetime_s`` seconds.

    Raises:
        FileNotFoundError: ``tcpdump`` or ``timeout`` is not installed.
    """
    why = tcpdump_missing()
    if why is not None:
        raise FileNotFoundError(why)
    tcpdump, timeout = shutil.which("tcpdump"), shutil.which("timeout")
    assert tcpdump is not None and timeout is not None
    # whole packets: a large kernel buffer, written in blocks; headers: packet by packet
    per_packet = ["-B", "16384", "-U", "--immediate-mode"]
    opts = ["-B", str(PAYLOAD_BUFFER_KIB)] if payload else per_packet
    return [
        timeout, f"{lifetime_s:.0f}", tcpdump, "-i", port, "-s", "0" if payload else str(SNAPLEN),
        *opts, "-n", "-q", "-Z", "root", "-w", path, "tcp",
    ]  # fmt: skip


@dataclass(frozen=True)
class Packets:
    """The TCP segments of a capture that carry payload.

    Attributes:
        t: (n,) capture times, seconds (``time.time()`` clock).
        src: (n,) last octet of the source IPv4 address.
        dst: (n,) last octet of the destination IPv4 address.
        payload: (n,) TCP payload bytes.
    """

    t: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    payload: np.ndarray


def tcp_records(path: str | Path) -> Iterator[tuple[float, bytes, int]]:
    """(time in seconds, captured bytes, original length) of each whole Ethernet/IPv4/TCP
    record of a classic pcap file; others, and a record cut short at the end (a
    capture stopped mid-write), are skipped.

    Raises:
        ValueError: not a little-endian pcap file.
    """
    b = Path(path).read_bytes()
    if len(b) < 24 or struct.unpack_from("<I", b)[0] not in _PCAP_MAGIC:
        raise ValueError(f"{path}: not a pcap capture (tcpdump -w)")
    scale = _PCAP_MAGIC[struct.unpack_from("<I", b)[0]]
    off, n = 24, len(b)
    while off + 16 <= n:
        sec, frac, incl, orig = struct.unpack_from("<IIII", b, off)
        off += 16
        pkt = b[off : off + incl]
        off += incl
        if len(pkt) < incl or len(pkt) < 54 or pkt[12:14] != b"\x08\x00" or pkt[23] != 6:
            continue  # cut short, not IPv4, or not TCP
        yield sec + frac * scale, pkt, orig


def tcp_header(pkt: bytes) -> tuple[int, int, int] | None:
    """(IPv4 header bytes, IPv4 total length, TCP header bytes) of an Ethernet/IPv4/TCP
    record of :func:`tcp_records`; None when the record is too short to hold them."""
    ihl = (pkt[14] & 15) * 4
    if len(pkt) < 14 + ihl + 13:
        return None
    return ihl, struct.unpack_from(">H", pkt, 16)[0], (pkt[14 + ihl + 12] >> 4) * 4


def read_pcap(path: str | Path) -> Packets:
    """Read a classic pcap file of Ethernet/IPv4/TCP packets (others are skipped).

    A record cut short at the end (a capture stopped mid-write) is ignored.

    Raises:
        ValueError: not a little-endian pcap file.
    """
    t, src, dst, pay = [], [], [], []
    for time_s, pkt, _ in tcp_records(path):
        header = tcp_header(pkt)
        if header is None:
            continue
        ihl, total, tcp_len = header
        size = total - ihl - tcp_len
        if size > 0:
            t.append(time_s)
            src.append(pkt[29])
            dst.append(pkt[33])
            pay.append(size)
    return Packets(
        np.array(t, dtype=float),
        np.array(src, dtype=np.int64),
        np.array(dst, dtype=np.int64),
        np.array(pay, dtype=np.int64),
    )


def transfer_gap_s(
    pull_bytes: float, push_bytes: float, rate_Bps: float, longest_s: float = 0.02
) -> float:
    """The longest pause one transfer holds, seconds: ``longest_s`` (a pull's
    per-tensor requests), or half the shorter of a step's pull and push at the
    link's rate where that is shorter, since one worker's transfers in one
    direction are at least its transfer in the other apart. LeNet5's skeleton
    at 200 Mbit/s pulls 248 KB every 27 ms, 15–19 ms apart: with 20 ms, 5–90
    steps' pulls read as one transfer; with 5 ms, each step's is one.

    Raises:
        ValueError: a size or ``rate_Bps`` not > 0.
    """
    if not (pull_bytes > 0 and push_bytes > 0 and rate_Bps > 0):
        raise ValueError(f"bytes and rate must be > 0, got {pull_bytes}, {push_bytes}, {rate_Bps}")
    return min(longest_s, 0.5 * min(pull_bytes, push_bytes) / rate_Bps)


def bursts(t: np.ndarray, size: np.ndarray, gap_s: float, min_bytes: float) -> np.ndarray:
    """Transfers of one flow: runs of packets less than ``gap_s`` apart that carry
    at least ``min_bytes`` in all.

    Args:
        t: (n,) sorted packet times, seconds.
        size: (n,) payload bytes.

    Returns:
        (k, 2) start and end of each transfer (its first and last packet), seconds.
    """
    if len(t) == 0:
        return np.zeros((0, 2))
    cut = np.flatnonzero(np.diff(t) > gap_s)
    first, last = np.r_[0, cut + 1], np.r_[cut, len(t) - 1]
    total = np.add.reduceat(size, first)
    keep = total >= min_bytes
    return np.column_stack([t[first[keep]], t[last[keep]]])


def join_losses(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    gap_s: float = 0.02,
    min_overlap_s: float = 0.0,
) -> dict[int, list[float]]:
    """How much later than a fair share each joining transfer got its bytes, seconds,
    by how many other workers' transfers it joined.

    A join is a worker's transfer in ``direction`` that starts while ``k ≥ 1``
    other workers' transfers (the incumbents) are on the wire. Its window
    runs from the joiner's first packet until the first incumbent ends or
    another transfer starts, whichever is first (the set of transfers stays
    the same), and the joiner must still be sending then. Over the window,
    ``k · (B̄_incumbent − B_joiner) / rate``, where ``B`` are the bytes moved
    in the window (the incumbents' mean) and ``rate`` all of them together
    per second. Fair sharing from the first packet gives 0; a joiner that
    gets its share ``d`` seconds late, as the simulator's join delay holds it
    (the incumbents share the link for ``d``), gives ``d``.

    Args:
        packets: the capture (:func:`read_pcap`).
        server: last address octet of the PS.
        workers: last address octets of the workers.
        direction: ``"push"`` (worker to PS) or ``"pull"`` (PS to worker).
        min_bytes: bytes a transfer carries at least (half a step's, say),
            so that a step's small messages are not taken for one.
        gap_s: longest pause inside one transfer, seconds.
        min_overlap_s: shortest window counted, seconds.

    Returns:
        ``{k: [lateness of each join of k incumbents, in time order]}``.

    Raises:
        ValueError: unknown ``direction``.
    """
    found = join_records(packets, server, workers, direction, min_bytes, gap_s, min_overlap_s)
    return {k: [late for late, _ in v] for k, v in found.items()}


def join_gains(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    rate_Bps: float,
    gap_s: float = 0.02,
    min_overlap_s: float = 0.0,
) -> dict[int, list[float]]:
    """How much earlier than a fair share of a full link the incumbents of each
    join got their bytes, seconds, by how many transfers the joiner joined.

    The joins and windows of :func:`join_losses`; over a window of ``W``
    seconds, ``k (k + 1) (B̄_incumbent − rate_Bps · W / (k + 1)) / rate_Bps``.
    It equals :func:`join_losses`' lateness when the link stays full (a
    simulated join delay ``d`` gives ``d``: the incumbents share the link for
    ``d``), and leaves out what the joiner did not send at all (a push whose
    gradients backprop has not yet produced), which only the joiner's own end
    pays and which the simulator models by gating the push. That gain is what
    moves the incumbent's end against the joiner's, the force on two workers'
    phases (docs/steady-state-log.md, "The force on the phase").

    Args:
        packets, server, workers, direction, min_bytes, gap_s, min_overlap_s:
            as :func:`join_losses`.
        rate_Bps: the link's rate when full, bytes/s (:func:`saturated_rate`).

    Returns:
        ``{k: [gain of each join of k incumbents, in time order]}``.

    Raises:
        ValueError: unknown ``direction`` or ``rate_Bps`` not > 0.
    """
    if not rate_Bps > 0:
        raise ValueError(f"rate_Bps must be > 0, got {rate_Bps}")
    joins = []
    for start, b_inc, _, span in _join_windows(
        packets, server, workers, direction, min_bytes, gap_s, min_overlap_s
    ):
        k = len(b_inc)
        gain = k * (k + 1) * (statistics.fmean(b_inc) - rate_Bps * span / (k + 1)) / rate_Bps
        joins.append((k, start, gain))
    return _by_k(joins)


def join_records(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    gap_s: float = 0.02,
    min_overlap_s: float = 0.0,
) -> dict[int, list[tuple[float, float]]]:
    """Each join of :func:`join_losses` as (lateness, window), seconds.

    The window runs from the joiner's first packet until the first incumbent
    ends or another transfer starts: how long the joiner overlapped its
    incumbents. In a pair's captures a push's lateness grows with it, about
    28 ms + 0.045 × window, where a pull's stays about 10 ms
    (docs/steady-state-log.md, "The legs of the step").

    Args:
        packets, server, workers, direction, min_bytes, gap_s, min_overlap_s:
            as :func:`join_losses`.

    Returns:
        ``{k: [(lateness, window) of each join of k incumbents, in time order]}``.

    Raises:
        ValueError: unknown ``direction``.
    """
    joins = []
    for start, b_inc, b_join, span in _join_windows(
        packets, server, workers, direction, min_bytes, gap_s, min_overlap_s
    ):
        moved = sum(b_inc) + b_join
        if moved > 0:
            k = len(b_inc)
            late = k * (statistics.fmean(b_inc) - b_join) / (moved / span)
            joins.append((k, start, (late, span)))
    return _by_k(joins)


def join_lags(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    gap_s: float = 0.02,
) -> dict[int, list[tuple[float, float]]]:
    """Each joining transfer's lag growth and start lag, seconds, by how many it joined.

    A join is a worker's transfer in ``direction`` that starts while ``k ≥ 1``
    other workers' transfers (the incumbents) are on the wire, however
    briefly they overlap. Its start lag is the mean over the incumbents of
    ``start_joiner − start_incumbent``; its lag growth the mean of
    ``(end_joiner − end_incumbent) − (start_joiner − start_incumbent)``,
    sign included: 0 when the pair's offset came out of the overlap as it
    went in, ``d`` when the joiner fell ``d`` further behind, negative when
    it caught up. The growth is what a join does to the workers' phases,
    and what the simulator's join delay ``d`` does on a work-conserving link
    (:class:`~sgdsim.simulation.connection.JoinDelay`). The lateness of
    :func:`join_losses`, which those delays are drawn from, is the joiner's
    byte deficit over the overlap instead, which a real joiner partly makes
    up after it: a skeleton pair's pushes through the fair queue were 51 ms
    late by it and grew their lag by 4 ms (docs/steady-state-log.md, "The lag a
    join leaves").

    Args:
        packets, server, workers, direction, min_bytes, gap_s: as :func:`join_losses`.

    Returns:
        ``{k: [(lag growth, start lag) of each join of k incumbents, in time order]}``.

    Raises:
        ValueError: unknown ``direction``.
    """
    _, transfers = _transfers(packets, server, workers, direction, min_bytes, gap_s)
    joins = []
    for start, end, j in transfers:
        on_wire = [(a, b) for a, b, w in transfers if w != j and a < start < b]
        if on_wire:
            growth = statistics.fmean((end - b) - (start - a) for a, b in on_wire)
            lag = statistics.fmean(start - a for a, _ in on_wire)
            joins.append((len(on_wire), start, (growth, lag)))
    return _by_k(joins)


def _by_k(joins: Iterable[tuple[int, float, _V]]) -> dict[int, list[_V]]:
    """``{k: [value, …]}`` of ``(k, start, value)`` joins, each list in start order."""
    out: dict[int, list[tuple[float, _V]]] = {}
    for k, start, value in joins:
        out.setdefault(k, []).append((start, value))
    return {k: [v for _, v in sorted(got, key=lambda x: x[0])] for k, got in sorted(out.items())}


def _join_windows(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    gap_s: float,
    min_overlap_s: float,
) -> Iterator[tuple[float, list[float], float, float]]:
    """Each join of :func:`join_losses`: (joiner's first packet, seconds; bytes
    each incumbent moved in the window; bytes the joiner moved; the window,
    seconds)."""
    flows, transfers = _transfers(packets, server, workers, direction, min_bytes, gap_s)

    def moved(w: int, lo: float, hi: float) -> float:
        t, size = flows[w]
        return float(size[(t >= lo) & (t <= hi)].sum())

    for start, end, j in transfers:
        on_wire = [(b, w) for a, b, w in transfers if w != j and a < start < b]
        if not on_wire:
            continue
        until = min(
            [b for b, _ in on_wire] + [a for a, _, w in transfers if w != j and start < a < end]
        )
        if until >= end or until - start < min_overlap_s:
            continue
        yield (
            start,
            [moved(w, start, until) for _, w in on_wire],
            moved(j, start, until),
            until - start,
        )


def saturated_rate(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    min_bytes: float,
    gap_s: float = 0.02,
    fraction: float = 0.05,
    max_bytes: float = math.inf,
) -> float | None:
    """The link's rate when full, bytes/s: the median over pulls that no other
    transfer overlaps (no other pull, no push) of the rate between ``fraction``
    and ``1 − fraction`` of their bytes (the PS holds a pull's bytes from its
    start, so the link bounds it; the headers the capture counts are in it). A
    pull short against the shaper's token bucket runs above the rate (LeNet5
    at 100 Mbit/s: 12.65 MB/s once); a step's main pulls of the larger models
    do not (MobileNetV2: 12.35 MB/s). A push beside it slows a pull through a
    deep FIFO, its ACKs queued behind the push (GoogLeNet's skeleton pair at
    100 Mbit/s through a 200-ms FIFO: 8.5 MB/s, 73 % of it beside a push).
    Only transfers of ``min_bytes`` to ``max_bytes`` count: one worker's pulls
    of steps less than ``gap_s`` apart read as one transfer whose rate holds
    the pauses between them (LeNet5's skeleton at 200 Mbit/s through a shallow
    FIFO: 2–4 pulls 12 ms apart at 9–14 MB/s, each at 25.5). None without
    such a pull."""
    flows, transfers = _transfers(packets, server, workers, "pull", min_bytes, gap_s)
    _, pushes = _transfers(packets, server, workers, "push", min_bytes, gap_s)
    rates = []
    for start, end, w in transfers:
        others = [(a, b) for a, b, v in transfers if v != w] + [(a, b) for a, b, _ in pushes]
        if any(a < end and start < b for a, b in others):
            continue
        t, size = flows[w]
        m = (t >= start) & (t <= end)
        done, times = np.cumsum(size[m]), t[m]
        if done[-1] > max_bytes:
            continue
        lo, hi = np.searchsorted(done, [fraction * done[-1], (1 - fraction) * done[-1]])
        if hi > lo and times[hi] > times[lo]:
            rates.append(float(done[hi] - done[lo]) / float(times[hi] - times[lo]))
    return statistics.median(rates) if rates else None


def _flows(
    packets: Packets, server: int, workers: Sequence[int], direction: str, big_bytes: int = 0
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each worker's packets in ``direction`` of more than ``big_bytes``: (times, payloads).

    Raises:
        ValueError: unknown ``direction``.
    """
    if direction not in ("push", "pull"):
        raise ValueError(f"direction must be 'push' or 'pull', got {direction!r}")
    p = packets
    flows = {}
    for w in workers:
        sender, receiver = (w, server) if direction == "push" else (server, w)
        m = (p.src == sender) & (p.dst == receiver) & (p.payload > big_bytes)
        flows[w] = (p.t[m], p.payload[m])
    return flows


def _transfers(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    gap_s: float,
    big_bytes: int = 0,
) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], list[tuple[float, float, int]]]:
    """Each worker's flow in ``direction`` of packets of more than ``big_bytes``
    (:func:`_flows`) and its transfers (start, end, worker) of at least
    ``min_bytes`` (:func:`bursts`).

    Raises:
        ValueError: unknown ``direction``.
    """
    flows = _flows(packets, server, workers, direction, big_bytes)
    transfers = [
        (float(a), float(b), w) for w in workers for a, b in bursts(*flows[w], gap_s, min_bytes)
    ]
    return flows, transfers


def start_excess(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    rate_Bps: float,
    fraction: float = 0.05,
    gap_s: float = 0.02,
) -> dict[int, list[float]]:
    """How much longer than its share of the link each transfer's start took, seconds,
    by how many other workers' transfers were on the wire over it (0: alone).

    A transfer's start runs from its first packet to the packet that completes
    ``fraction`` of its bytes; its excess is that time less ``fraction · B ·
    (k + 1) / rate_Bps``, the time at a fair share beside ``k`` other
    transfers that cover the whole start (``k = 0``: no other transfer
    overlaps it). Starts that another transfer overlaps only in part are
    not counted. Alone, the excess is the transfer's own start: for a pull
    the PS's last requests of the push before the pull's bulk, for a push
    backprop producing its first gradients, both of which the simulator
    models itself. Joined minus alone is what a join costs its start
    (docs/steady-state-log.md, "Where the simulated pair's catch-up comes
    from"); :func:`join_losses` counts the start's own time as well.

    Args:
        packets, server, workers, direction, min_bytes, gap_s: as :func:`join_losses`.
        rate_Bps: the link's rate, bytes/s.
        fraction: share of the transfer's bytes that makes its start (0 < fraction ≤ 1).

    Returns:
        ``{k: [excess of each transfer's start, in time order]}``.

    Raises:
        ValueError: unknown ``direction``, ``rate_Bps`` not > 0 or ``fraction``
            outside (0, 1].
    """
    if not rate_Bps > 0 or not 0 < fraction <= 1:
        raise ValueError(f"need rate_Bps > 0 and 0 < fraction <= 1, got {rate_Bps}, {fraction}")
    flows, transfers = _transfers(packets, server, workers, direction, min_bytes, gap_s)
    out: dict[int, list[tuple[float, float]]] = {}
    for start, end, w in transfers:
        t, size = flows[w]
        inside = (t >= start) & (t <= end)
        done = np.cumsum(size[inside])
        mark = float(t[inside][np.searchsorted(done, fraction * done[-1])])
        others = [(a, b) for a, b, v in transfers if v != w and a <= mark and b >= start]
        k = len(others)
        if any(not (a <= start and b >= mark) for a, b in others):
            continue  # another transfer starts or ends during this one's start
        fair = fraction * float(done[-1]) * (k + 1) / rate_Bps
        out.setdefault(k, []).append((start, mark - start - fair))
    return {k: [x for _, x in sorted(v)] for k, v in sorted(out.items())}


def step_boundaries(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    pull_bytes: float,
    big_bytes: int = 1000,
    gap_s: float = 0.02,
) -> list[float]:
    """Seconds from a worker's last push packet to the bulk of its next pull.

    For each pull of a worker (a transfer of at least half ``pull_bytes``
    from the PS, :func:`bursts`) after its first: its first packet of more
    than ``big_bytes`` less the worker's last packet of more than
    ``big_bytes`` to the PS before it. The PS's small request packets for
    the push's last gradients come before both and are left out. This is
    the time a real step spends between its push and its next pull, which
    the simulator holds as the profile's ``overhead_s`` + ``pull_start_s``
    (docs/steady-state-log.md, "Where the simulated pair's catch-up comes from").

    Returns:
        The boundaries of every worker's steps, seconds, worker by worker in time order.
    """
    out: list[float] = []
    pulls, transfers = _transfers(packets, server, workers, "pull", pull_bytes / 2, gap_s)
    pushes = _flows(packets, server, workers, "push")
    for w in workers:
        t_pull, s_pull = pulls[w]
        t_push, s_push = pushes[w]
        big_pull, big_push = t_pull[s_pull > big_bytes], t_push[s_push > big_bytes]
        starts = sorted(a for a, _, v in transfers if v == w)
        for a in starts[1:]:
            i = int(np.searchsorted(big_pull, a))
            if i == len(big_pull):
                continue
            j = int(np.searchsorted(big_push, big_pull[i])) - 1
            if j >= 0:
                out.append(float(big_pull[i] - big_push[j]))
    return out


def two_way_shares(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    pull_bytes: float,
    push_bytes: float,
    gap_s: float = 0.02,
    bin_s: float = 0.001,
    min_s: float = 0.2,
    ramp_s: float = 0.0,
) -> tuple[float, float] | None:
    """What each direction of the PS's port carries while the other carries data too,
    as a share of what it carries alone (docs/steady-state-log.md, "Two-way traffic
    through a FIFO").

    Time is cut into ``bin_s`` bins; a direction is busy in a bin that lies
    wholly inside one of its transfers (:func:`bursts` of at least half a
    step's ``pull_bytes`` or ``push_bytes``, any worker). A direction's share
    is its bytes per second over the bins where both directions are busy,
    divided by the same over the bins where it alone is, at most 1: the gaps
    a transfer has of its own (per-tensor requests, flow control) are in both
    and cancel. Behind a FIFO each direction's ACKs queue behind the other's
    data, and a share below 1 is TCP leaving its direction idle
    (Zhang, Shenker & Clark, SIGCOMM 1991).

    Args:
        packets, server, workers, gap_s: as :func:`join_losses`.
        pull_bytes, push_bytes: bytes a step pulls and pushes (> 0).
        bin_s: bin width, seconds (> 0).
        min_s: least busy time, seconds, each of the four rates needs.
        ramp_s: seconds after each transfer's start, in either direction, left
            out of both the beside and the alone bins (≥ 0). A transfer's first
            tens of ms run below the rate whatever the other direction does
            (TCP's start), and a pair in phase has most of its two-way bins
            there: through the fair queue one skeleton run's push share was
            0.70 while the pair was in phase and 0.88 while it alternated with
            0, 0.99 in both with 0.1 s (docs/steady-state-log.md, "The lag a join
            leaves").

    Returns:
        ``(pull_share, push_share)``, each in (0, 1]; None when either
        direction was busy alone or beside the other for less than ``min_s``.

    Raises:
        ValueError: bytes or ``bin_s`` not > 0, or ``ramp_s`` < 0.
    """
    if not (pull_bytes > 0 and push_bytes > 0 and bin_s > 0 and ramp_s >= 0):
        raise ValueError(
            f"need bytes and bin_s > 0 and ramp_s >= 0, got {pull_bytes}, {push_bytes}, "
            f"{bin_s}, {ramp_s}"
        )
    if len(packets.t) == 0:
        return None
    edges = np.arange(packets.t.min(), packets.t.max() + bin_s, bin_s)
    carried, busy = {}, {}
    starting = np.zeros(len(edges) - 1, dtype=bool)
    for direction, size in (("pull", pull_bytes), ("push", push_bytes)):
        flows, transfers = _transfers(packets, server, workers, direction, size / 2, gap_s)
        t = np.concatenate([f[0] for f in flows.values()])
        b = np.concatenate([f[1] for f in flows.values()])
        carried[direction] = np.histogram(t, edges, weights=b)[0]
        on = np.zeros(len(edges) - 1, dtype=bool)
        for start, end, _ in transfers:
            lo = np.searchsorted(edges, start, side="left")
            hi = np.searchsorted(edges, end, side="right")
            on[lo : max(lo, hi - 1)] = True  # bins wholly inside [start, end]
            if ramp_s > 0:
                starting[lo : np.searchsorted(edges, start + ramp_s, side="right")] = True
        busy[direction] = on
    both = busy["pull"] & busy["push"] & ~starting
    shares = []
    for direction, other in (("pull", "push"), ("push", "pull")):
        alone = busy[direction] & ~busy[other] & ~starting
        if min(both.sum(), alone.sum()) * bin_s < min_s:
            return None
        got = carried[direction]
        rate_both, rate_alone = got[both].mean(), got[alone].mean()
        if not rate_alone > 0:
            return None
        shares.append(float(min(1.0, rate_both / rate_alone)))
    return shares[0], shares[1]


def start_deficits(
    packets: Packets,
    server: int,
    workers: Sequence[int],
    direction: str,
    min_bytes: float,
    rate_Bps: float,
    big_bytes: int = 1000,
    gap_s: float = 0.05,
) -> dict[int, list[float]]:
    """How far behind its share each transfer's start fell, seconds of the full link,
    by how many other workers' transfers it joined (0: alone).

    A transfer is a worker's run of packets of more than ``big_bytes`` (the
    data; per-tensor requests and responses are smaller) less than ``gap_s``
    apart, carrying at least ``min_bytes`` (half a step's). Its start is its
    first ``W = min_bytes / rate_Bps`` seconds (half the step's transfer
    alone). Alone (no other transfer overlaps the start): ``W`` less the
    start's bytes over ``rate_Bps``. Joining ``k`` transfers that ran since
    ``W / 2`` before it and run through its start (incumbents past their own
    start): its fair share of the ``k + 1`` transfers' bytes over the start
    less its own, over ``rate_Bps``. Other transfers are not counted.

    In a fluid model of a fair link, two equal transfers ``d`` apart end
    ``d + 2 δ_joined − δ_alone`` apart (δ in seconds of link): the joiner's
    deficit goes to the incumbent, the lone starter's is idle link. A real
    MobileNetV2 skeleton pair (100 Mbit/s, fair, BBR) had δ_alone 29.6 ms
    and δ_joined 23.7 ms, so each overlapping push moved the pair about
    +18 ms apart, as its legs did (+16.5 ms; docs/steady-state-log.md,
    "The joiner's start").

    Args:
        packets, server, workers: as :func:`join_losses`.
        direction: ``"push"`` or ``"pull"``.
        min_bytes: bytes a transfer carries at least (> 0).
        rate_Bps: the link's rate, bytes/s (> 0; :func:`saturated_rate`).
        big_bytes: payload of the smallest data packet, bytes.
        gap_s: longest pause inside one transfer, seconds.

    Returns:
        ``{k: [deficit of each start, seconds, in time order]}``, ``k = 0`` alone.

    Raises:
        ValueError: unknown ``direction``, ``min_bytes`` or ``rate_Bps`` not > 0.
    """
    if not (min_bytes > 0 and rate_Bps > 0):
        raise ValueError(f"need min_bytes and rate_Bps > 0, got {min_bytes}, {rate_Bps}")
    big, transfers = _transfers(packets, server, workers, direction, min_bytes, gap_s, big_bytes)
    window = min_bytes / rate_Bps

    def moved(w: int, lo: float, hi: float) -> float:
        t, s = big[w]
        return float(s[(t >= lo) & (t < hi)].sum())

    out: dict[int, list[tuple[float, float]]] = {}
    for a, b, w in transfers:
        if b - a < window:
            continue
        end = a + window
        others = [(a2, b2, v) for a2, b2, v in transfers if v != w and a2 < end and b2 > a]
        mine = moved(w, a, end)
        if not others:
            out.setdefault(0, []).append((a, window - mine / rate_Bps))
        elif all(a2 <= a - window / 2 and b2 >= end for a2, b2, _ in others):
            k = len(others)
            total = mine + sum(moved(v, a, end) for _, _, v in others)
            out.setdefault(k, []).append((a, (total / (k + 1) - mine) / rate_Bps))
    return {k: [x for _, x in sorted(v)] for k, v in sorted(out.items())}


def trace_packets(
    trace: Iterable[Sequence[object]],
    pull_bytes: Sequence[float],
    push_bytes: Sequence[float],
    packet_bytes: float = 8948.0,
) -> Packets:
    """A simulated run's transfers as the capture of its PS's port would hold them.

    Each pull or push record ``(kind, worker, tensor, start, end, …)`` of a
    :func:`~sgdsim.simulation.async_ps.simulate_async` trace (whole tensors,
    as the ``tf_default`` policy sends them) becomes ``⌈bytes /
    packet_bytes⌉`` packets spread evenly over ``[start, end]``: the PS is
    address 1 and worker ``i`` address ``i + 2``, as on the testbed. So the
    capture's functions (:func:`start_deficits`) read the simulator's starts
    as they read the testbed's.

    Args:
        trace: the trace records.
        pull_bytes: (P,) bytes of each pulled tensor.
        push_bytes: (Q,) bytes of each pushed tensor.
        packet_bytes: payload of a full packet, bytes (MTU 9000's by default).

    Returns:
        The :class:`Packets`, in time order.
    """
    t: list[np.ndarray] = []
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    size: list[np.ndarray] = []
    for rec in trace:
        kind, worker, tensor, start, end = rec[:5]
        if kind not in ("pull", "push"):
            continue
        nbytes = float((pull_bytes if kind == "pull" else push_bytes)[int(tensor)])  # type: ignore[call-overload]
        n = max(1, int(np.ceil(nbytes / packet_bytes)))
        t.append(np.linspace(float(start), float(end), n + 1)[1:])  # type: ignore[arg-type]
        host = int(worker) + 2  # type: ignore[call-overload]
        src.append(np.full(n, 1 if kind == "pull" else host))
        dst.append(np.full(n, host if kind == "pull" else 1))
        size.append(np.full(n, nbytes / n))
    if not t:
        return Packets(np.zeros(0), np.zeros(0, int), np.zeros(0, int), np.zeros(0))
    order = np.argsort(np.concatenate(t), kind="stable")
    return Packets(
        np.concatenate(t)[order],
        np.concatenate(src)[order],
        np.concatenate(dst)[order],
        np.concatenate(size)[order],
    )
