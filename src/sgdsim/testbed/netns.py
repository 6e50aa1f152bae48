"""Emulated network testbed: one Linux network namespace per host, joined by a bridge.

Layout of a testbed with run id ``sgd-1a2b3c`` and N workers::

    sgd-1a2b3c-br   bridge namespace: br0 plus one veth end per host (vps, vw0 …)
    sgd-1a2b3c-ps   host namespace: lo, eth0 = 10.213.<k>.1/24
    sgd-1a2b3c-w0   host namespace: lo, eth0 = 10.213.<k>.2/24
    …

Each host's ``eth0`` is one end of a veth pair whose other end is a port of
``br0``; nothing is added to the root namespace, and the addresses exist only
inside the testbed. With a bandwidth, a token-bucket filter (``tbf``) shapes
BOTH ends of every veth, so each host's NIC sends and receives at most the rate
(bit/s) per direction; with a latency, ``netem`` delays every packet a host
sends by that one-way latency (seconds). Every host's TCP uses one congestion
control (the route to the testbed's subnet names it), the host machine's
default unless given. Needs root and iproute2 (``ip``,
``tc``); :func:`check_available` says why not otherwise.

Each run records its run id and owning PID in :func:`state_dir` before it
creates a namespace; :func:`sweep_stale`, called when a testbed starts, removes
what runs killed without cleaning up (SIGKILL) left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from sgdsim.errors import SgdsimError
from sgdsim.profiling.procs import spawn, stop

#: Prefix of every namespace a testbed creates (``sgd-<6 hex>-<host>``).
PREFIX = "sgd-"
#: Search path for ``ip`` and ``tc`` (they live in /usr/sbin, often not on a user's PATH).
_TOOL_PATH = os.pathsep.join(
    [os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/bin"]
)
_CMD_TIMEOUT_S = 30.0
#: The kernel's default TCP congestion control, which new namespaces inherit.
_CC_DEFAULT = Path("/proc/sys/net/ipv4/tcp_congestion_control")
#: The congestion controls this kernel has loaded.
_CC_AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


class TestbedUnavailable(SgdsimError):
    """The emulated network cannot be built here (not root, no iproute2, no netns)."""

    __test__ = False  # not a pytest test class despite the name


class TestbedError(SgdsimError):
    """An ``ip``/``tc`` command failed while building the testbed."""

    __test__ = False


def _tool(name: str) -> str | None:
    return shutil.which(name, path=_TOOL_PATH)


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=_CMD_TIMEOUT_S, check=False
    )


def state_dir() -> Path:
    """Directory of the run records: ``$SGDSIM_TESTBED_STATE`` or ``/run/sgdsim/testbeds``."""
    return Path(os.environ.get("SGDSIM_TESTBED_STATE", "/run/sgdsim/testbeds"))


def _start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # fields after the command name


def _claim(run_id: str) -> Path:
    """Record that this process owns the namespaces named ``run_id`` or ``run_id-*``.

    Written (atomically) before the first namespace exists, so a run killed at
    any point leaves a record for :func:`sweep_stale`.
    """
    import json

    from sgdsim.io import atomic_path

    record = state_dir() / f"{run_id}.json"
    pid = os.getpid()
    with atomic_path(record) as tmp:
        tmp.write_text(json.dumps({"run_id": run_id, "pid": pid, "start": _start_ticks(pid)}))
    return record


def _owner_alive(record: dict[str, Any]) -> bool:
    """True while the process that wrote ``record`` runs (same PID and start time)."""
    pid, start = record.get("pid"), record.get("start")
    if not isinstance(pid, int):
        return False
    ticks = _start_ticks(pid)
    return ticks is not None and (start is None or ticks == start)


def sweep_stale() -> list[str]:
    """Remove the namespaces, and the processes in them, of testbed runs whose owner died.

    Every testbed (and the probe of :func:`check_available`) records its run
    id and owning PID with its start time in :func:`state_dir` before it
    creates a namespace, and deletes the record once it has removed them. A
    record whose process is gone (SIGKILL, a cluster job killed at its time
    limit, a power cut) marks leftovers: its namespaces (exactly ``run_id`` or
    ``run_id-*``, the run id being random) are emptied with SIGKILL and
    deleted, then the record. Namespaces without a record (other tools, other
    checkouts) and those of live runs are never touched. Needs root (returns
    ``[]`` otherwise). Called when a :class:`Testbed` starts.

    Returns:
        Names of the namespaces removed.
    """
    import json

    ip = _tool("ip")
    base = state_dir()
    if ip is None or os.geteuid() != 0 or not base.is_dir():
        return []
    removed: list[str] = []
    existing: list[str] | None = None
    for path in sorted(base.glob("sgd-*.json")):
        try:
            record = json.loads(path.read_text())
            run_id = str(record["run_id"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not run_id.startswith(PREFIX) or _owner_alive(record):
            continue
        if existing is None:
            r = _run([ip, "netns", "list"])
            existing = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
        mine = [n for n in existing if n == run_id or n.startswith(run_id + "-")]
        left = False
        for ns in mine:
            _kill_in(ip, ns)
            if _run([ip, "netns", "del", ns]).returncode == 0:
                removed.append(ns)
            else:
                left = True
        if not left:
            path.unlink(missing_ok=True)
    if removed:
        print(
            f"[testbed] removed {len(removed)} namespace(s) of dead runs: {' '.join(removed)}",
            file=sys.stderr,
            flush=True,
        )
    return removed


def _kill_in(ip: str, ns: str) -> None:
    """SIGKILL every process inside namespace ``ns`` (except this one)."""
    r = _run([ip, "netns", "pids", ns])
    for tok in r.stdout.split():
        if tok.isdigit() and int(tok) != os.getpid():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(tok), signal.SIGKILL)


def _probe(ip: str, tc: str, need_netem: bool) -> str | None:
    """Build a throw-away namespace with a bridge, a veth and tbf; return why that failed."""
    ns = f"{PREFIX}probe-{secrets.token_hex(3)}"
    try:
        record = _claim(ns)
    except OSError as e:
        return f"cannot write the testbed's run record in {state_dir()}: {e}"
    r = _run([ip, "netns", "add", ns])
    if r.returncode != 0:
        record.unlink(missing_ok=True)
        return f"`ip netns add` is not permitted here: {r.stderr.strip() or r.returncode}"
    try:
        link, qdisc = [ip, "-n", ns, "link", "add"], [tc, "-n", ns, "qdisc", "add", "dev"]
        tbf = ["tbf", "rate", "10mbit", "burst", "65536", "limit", "131072"]
        filt = [tc, "-n", ns, "filter", "add", "dev", "va", "parent", "20:", "protocol", "ip"]
        u32 = ["prio", "1", "u32", "match", "u16", "0", "0xfe00", "at", "2", "flowid", "20:1"]
        steps: list[tuple[str, list[str]]] = [
            ("a bridge", [*link, "br0", "type", "bridge"]),
            ("a veth pair", [*link, "va", "type", "veth", "peer", "vb"]),
            ("the tbf qdisc", [*qdisc, "va", "root", "handle", "1:", *tbf]),
            (
                "the htb qdisc (kernel module sch_htb) inside tbf",
                [*qdisc, "va", "parent", "1:1", "handle", "20:", "htb"],
            ),
            ("a u32 filter (kernel module cls_u32)", [*filt, *u32]),
        ]
        if need_netem:
            steps.append(
                (
                    "the netem qdisc (kernel module sch_netem)",
                    [*qdisc, "vb", "root", "netem", "delay", "1ms"],
                )
            )
        for what, argv in steps:
            r = _run(argv)
            if r.returncode != 0:
                return f"cannot create {what} in a network namespace: {r.stderr.strip()}"
        return None
    finally:
        if _run([ip, "netns", "del", ns]).returncode == 0:
            record.unlink(missing_ok=True)


def check_available(need_netem: bool = False) -> str | None:
    """Say why the testbed cannot run here, or None when it can.

    Checks root, the ``ip`` and ``tc`` tools, and that a namespace with a
    bridge, a veth pair, a ``tbf`` qdisc holding an ``htb`` with a ``u32``
    filter (the fair queue) and ``netem`` when ``need_netem`` can really be
    created; the probe namespace is removed again.

    Returns:
        A human-readable reason (with the fix) or None.
    """
    if sys.platform != "linux":
        return f"the network testbed needs Linux network namespaces (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the network testbed needs root (network namespaces, veth, tc); run as root"
    ip, tc = _tool("ip"), _tool("tc")
    missing = [n for n, p in (("ip", ip), ("tc", tc)) if p is None]
    if missing or ip is None or tc is None:
        return f"the network testbed needs iproute2; not found: {', '.join(missing)}"
    try:
        return _probe(ip, tc, need_netem)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"probing network namespaces failed: {e}"


#: Default MTU of the testbed's links, bytes: Ethernet jumbo frames (see :class:`Link`).
DEFAULT_MTU = 9000
#: How each shaped NIC queues what waits for the rate (:attr:`Link.queue`).
QUEUES = ("fair", "fifo")
DEFAULT_QUEUE = "fair"


def tbf_params(
    bandwidth_bps: float, mtu: int = DEFAULT_MTU, buffer_bytes: int | None = None
) -> tuple[int, int]:
    """Token-bucket burst and queue limit, in bytes, for a rate in bit/s and an MTU.

    ``buffer_bytes`` (≥ one frame, ``mtu`` + 14) sets the queue limit; None
    keeps the default below.

    The burst holds 1 ms at the rate but at least two full frames (``mtu`` + 14
    bytes of Ethernet header): a NIC of rate R never sends faster than R, and a
    bucket of 10 ms (250 KB at 200 Mbit/s) let a whole step of a small model
    (LeNet5: 248 KB each way) through unshaped. tbf segments larger GSO packets
    itself and times with hrtimers, so the small bucket keeps the rate. The
    queue holds 50 ms at the rate but at least 64 KiB + one frame (one full GSO
    segment).

    Raises:
        ValueError: ``buffer_bytes`` below one frame.
    """
    rate_bytes_s = bandwidth_bps / 8.0
    frame = mtu + 14
    burst = max(2 * frame, int(rate_bytes_s * 0.001))
    if buffer_bytes is not None:
        _check_buffer(buffer_bytes, mtu)
        return burst, int(buffer_bytes)
    limit = max(65536 + frame, int(rate_bytes_s * 0.050))
    return burst, limit


def host_congestion_control() -> str:
    """This machine's default TCP congestion control (``cubic`` on most Linux
    hosts), which a testbed's hosts use unless given another; ``""`` unknown."""
    try:
        return _CC_DEFAULT.read_text().strip()
    except OSError:
        return ""


def _check_congestion_control(name: str) -> None:
    """Raise ValueError unless ``name`` looks like a TCP congestion control the
    kernel has or may load (``ip route … congctl`` loads its module)."""
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"congestion_control must be a name such as cubic or bbr, got {name!r}")


def _check_buffer(buffer_bytes: int, mtu: int) -> None:
    """Raise ValueError unless a queue of ``buffer_bytes`` holds one frame of
    ``mtu`` (``mtu`` + 14 bytes of Ethernet header)."""
    frame = mtu + 14
    if buffer_bytes < frame:
        raise ValueError(f"buffer_bytes must hold one frame ({frame} bytes), got {buffer_bytes}")


@dataclass(frozen=True)
class Link:
    """The links of a :class:`Testbed`: every host NIC's MTU, queue, buffer and TCP.

    Checked when made, before anything is built. The rate and the latency are
    the testbed's own arguments.

    Attributes:
        mtu: MTU of every link in bytes (68…65535). The default, 9000 (jumbo
            frames, common in data centres), keeps the emulation's own CPU cost
            low: tbf cuts every GSO packet larger than its bucket into MTU-sized
            frames, each a trip through the bridge and the peer's shaper, and on
            a virtual machine each shaper timer is a VM exit. Measured on this
            project's 2-core VM with plain TCP at 100 Mbit/s: 41.6 ns of kernel
            CPU per byte at MTU 1500, 7.6 at 9000, 0.7 unshaped. The prediction
            counts the frames' headers for the MTU
            (:func:`sgdsim.simulation.bounds.tbf_payload_fraction`).
        queue: how each shaped NIC queues the packets waiting for the rate.
            ``"fair"`` (default): one queue per peer host served by deficit round
            robin, and packets under 512 bytes first — flow isolation and
            sparse-flow priority as in fq_codel (Hoeiland-Joergensen et al., RFC
            8290), Linux's default qdisc, which this kernel may lack; built from
            tbf and HTB (:meth:`Testbed._fair_queue`). It is also what the
            simulator assumes of a NIC: fair between connections
            (:class:`sgdsim.simulation.link.PSLink`). ``"fifo"``: tbf's single
            50 ms FIFO, where one connection's burst delays every other's
            packets, ACKs of the reverse direction included.
        buffer_bytes: queue limit of every shaped NIC in bytes (≥ ``mtu`` + 14):
            of the FIFO with ``queue="fifo"``, of each per-peer queue with
            ``"fair"``. None: 50 ms at the rate, at least 64 KiB + one frame
            (:func:`tbf_params`). A switch port's shallow buffer is a few
            frames to a few ms at the rate; a deep one tens to hundreds of ms.
            Unused on an unshaped testbed.
        congestion_control: the TCP congestion control of every host (``cubic``,
            ``bbr``, ``reno``, …; see /proc/sys/net/ipv4/tcp_available_congestion_control),
            set on each host's route to the subnet (``ip route … congctl``), which
            needs no change to the machine's settings. None: the machine's default
            (:func:`host_congestion_control`), which namespaces inherit. Through a
            FIFO the congestion control decides how flows share the port. Whether
            this kernel has it is known only when a testbed is built
            (:class:`TestbedError` then).

    Raises:
        ValueError: an mtu outside 68…65535, an unknown queue, buffer_bytes below
            one frame or a malformed congestion_control name.
    """

    mtu: int = DEFAULT_MTU
    queue: str = DEFAULT_QUEUE
    buffer_bytes: int | None = None
    congestion_control: str | None = None

    def __post_init__(self) -> None:
        if self.queue not in QUEUES:
            raise ValueError(f"queue must be one of {', '.join(QUEUES)}, got {self.queue!r}")
        if not 68 <= self.mtu <= 65535:
            raise ValueError(f"mtu must be in 68..65535 bytes, got {self.mtu}")
        if self.buffer_bytes is not None:
            _check_buffer(self.buffer_bytes, self.mtu)
        if self.congestion_control is not None:
            _check_congestion_control(self.congestion_control)


class Testbed:
    """An emulated network of ``ps`` and ``w0`` … ``w{workers-1}`` hosts (context manager).

    Construction builds everything; :meth:`close` (also ``__exit__``, SIGINT,
    SIGTERM and interpreter exit) stops the processes started through it and
    removes every namespace and link it created. Closing twice is harmless.

    Args:
        workers: number of worker hosts (>= 1).
        bandwidth_bps: each host NIC's rate per direction in bit/s; None = unshaped.
        latency_s: one-way delay in seconds added (``netem``) to every packet a
            host sends; 0 = none. Host-to-host round trip = 2 x latency_s.
        subnet: third octet k of the private 10.213.k.0/24 (random when None).
        link: every link's MTU, NIC queue, buffer and TCP congestion control
            (:class:`Link`, checked when made); also read as :attr:`mtu`,
            :attr:`queue` and :attr:`buffer_bytes`, and ``congestion_control``
            names the one every host uses (the machine's default where the
            link gives none).

    Raises:
        TestbedUnavailable: :func:`check_available` gave a reason.
        TestbedError: an ``ip``/``tc`` command failed, such as a congestion control
            this kernel lacks (everything built is removed).
        ValueError: workers < 1, bandwidth_bps <= 0 or latency_s < 0.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        workers: int,
        bandwidth_bps: float | None = None,
        latency_s: float = 0.0,
        subnet: int | None = None,
        link: Link = Link(),
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if bandwidth_bps is not None and not bandwidth_bps > 0:
            raise ValueError(f"bandwidth_bps must be > 0 or None, got {bandwidth_bps}")
        if not latency_s >= 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        reason = check_available(need_netem=latency_s > 0)
        if reason is not None:
            raise TestbedUnavailable(reason)
        ip, tc = _tool("ip"), _tool("tc")
        assert ip is not None and tc is not None
        self._ip, self._tc = ip, tc
        self.workers = workers
        self.bandwidth_bps = bandwidth_bps
        self.latency_s = latency_s
        self.link = link
        #: The TCP congestion control every host uses.
        self.congestion_control = link.congestion_control or host_congestion_control()
        self.hosts: tuple[str, ...] = ("ps", *(f"w{k}" for k in range(workers)))
        sweep_stale()
        existing = self._list_namespaces()
        while True:
            self.run_id = f"{PREFIX}{secrets.token_hex(3)}"
            if not any(n.startswith(self.run_id + "-") for n in existing):
                break
        self._record = _claim(self.run_id)
        k = subnet if subnet is not None else 16 + secrets.randbelow(224)
        if not 0 <= k <= 255 or len(self.hosts) > 250:
            raise ValueError(f"subnet octet must be 0..255 and workers <= 249, got {k}")
        self.subnet = f"10.213.{k}.0/24"
        self._addresses = {h: f"10.213.{k}.{i + 1}" for i, h in enumerate(self.hosts)}
        self.bridge_namespace = f"{self.run_id}-br"
        self._created: list[str] = []  # namespaces, in creation order
        self._procs: list[subprocess.Popen[bytes]] = []
        self._closed = False
        self._closing = False
        self._pending_signal: int | None = None
        self._old_handlers: dict[int, Any] = {}
        self._install_handlers()
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ building
    def _cmd(self, argv: Sequence[str]) -> None:
        r = _run(argv)
        if r.returncode != 0:
            raise TestbedError(
                f"testbed {self.run_id}: `{' '.join(argv)}` failed with code "
                f"{r.returncode}: {r.stderr.strip()}"
            )

    def _add_namespace(self, name: str) -> None:
        self._cmd([self._ip, "netns", "add", name])
        self._created.append(name)
        self._cmd([self._ip, "-n", name, "link", "set", "lo", "up"])

    def _shape(self, ns: str, dev: str, delay_s: float) -> None:
        """Root qdisc on ``dev`` in ``ns``: optional netem delay, then tbf at the rate,
        holding the fair queue of :meth:`_fair_queue` when ``queue="fair"``."""
        tc = [self._tc, "-n", ns, "qdisc", "add", "dev", dev]
        parent = ["root"]
        if delay_s > 0:
            self._cmd([*tc, "root", "handle", "1:", "netem", "delay", f"{delay_s * 1e6:.0f}us"])
            parent = ["parent", "1:1"]
        if self.bandwidth_bps is None:
            return
        burst, limit = tbf_params(self.bandwidth_bps, self.mtu, self.buffer_bytes)
        tbf = ["tbf", "rate", f"{self.bandwidth_bps:.0f}bit", "burst", str(burst)]
        self._cmd([*tc, *parent, "handle", "10:", *tbf, "limit", str(limit)])
        if self.queue == "fair":
            self._fair_queue(ns, dev, limit)

    def _fair_queue(self, ns: str, dev: str, limit: int) -> None:
        """An HTB inside the tbf (``10:1``) that serves its packets fairly per peer host.

        tbf keeps the rate exactly and cuts GSO packets into frames before they
        reach its inner qdisc, so the HTB below schedules frames. Every HTB
        class's rate is far above the link's, so HTB never limits anything: it
        serves its classes by priority, then by deficit round robin (quantum =
        one frame) among the classes of a priority. Classes: ``20:10``, priority
        0, takes IPv4 packets shorter than 512 bytes (TCP ACKs, HTTP/2 window
        updates and pings); ``20:1xx``, priority 1, one per peer host (by
        destination on a host's eth0, by source on its bridge port); ``20:11``
        the rest. Each class queues in its own bfifo of the tbf limit (bytes).
        """
        assert self.bandwidth_bps is not None
        frame = self.mtu + 14
        sending = ns != self.bridge_namespace  # a host's eth0, else its bridge port
        host = ns[len(self.run_id) + 1 :] if sending else dev[1:]
        peers = [h for h in self.hosts if h != host]
        qdisc = [self._tc, "-n", ns, "qdisc", "add", "dev", dev]
        klass = [self._tc, "-n", ns, "class", "add", "dev", dev]
        filt = [self._tc, "-n", ns, "filter", "add", "dev", dev, "parent", "20:", "protocol", "ip"]
        self._cmd([*qdisc, "parent", "10:1", "handle", "20:", "htb", "default", "11"])
        unlimited = f"{100 * self.bandwidth_bps:.0f}bit"
        self._cmd([*klass, "parent", "20:", "classid", "20:1", "htb", "rate", unlimited])
        classes = [("20:10", "0"), ("20:11", "1")]
        classes += [(f"20:{100 + i}", "1") for i in range(len(peers))]
        burst = str(16 * frame)
        htb = ["htb", "rate", unlimited, "burst", burst, "cburst", burst, "quantum", str(frame)]
        for cid, prio in classes:
            self._cmd([*klass, "parent", "20:1", "classid", cid, *htb, "prio", prio])
            self._cmd([*qdisc, "parent", cid, "bfifo", "limit", str(limit)])
        # IPv4 total length (bytes 2-3 of the header) < 512: the control class
        self._cmd(
            [*filt, "prio", "1", "u32", "match", "u16", "0", "0xfe00", "at", "2", "flowid", "20:10"]
        )
        end = "dst" if sending else "src"
        for i, peer in enumerate(peers):
            match = ["match", "ip", end, f"{self.address(peer)}/32"]
            self._cmd([*filt, "prio", "2", "u32", *match, "flowid", f"20:{100 + i}"])

    def _build(self) -> None:
        ip, br = self._ip, self.bridge_namespace
        cc = self.link.congestion_control  # None: the namespace's default, inherited
        self._add_namespace(br)
        self._cmd([ip, "-n", br, "link", "add", "br0", "type", "bridge"])
        self._cmd([ip, "-n", br, "link", "set", "br0", "up"])
        for host in self.hosts:
            ns, port = self.namespace(host), f"v{host}"
            self._add_namespace(ns)
            self._cmd(
                [
                    ip,
                    "-n",
                    br,
                    "link",
                    "add",
                    port,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                ]
            )
            self._cmd([ip, "-n", br, "link", "set", port, "master", "br0"])
            self._cmd([ip, "-n", br, "link", "set", port, "mtu", str(self.mtu), "up"])
            self._cmd([ip, "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0"])
            self._cmd([ip, "-n", ns, "link", "set", "eth0", "mtu", str(self.mtu), "up"])
            if cc is not None:
                route = [ip, "-n", ns, "route", "replace", self.subnet, "dev", "eth0"]
                src = ["proto", "kernel", "scope", "link", "src", self.address(host)]
                r = _run([*route, *src, "congctl", cc])
                if r.returncode != 0:
                    have = _CC_AVAILABLE.read_text().strip() if _CC_AVAILABLE.exists() else "?"
                    raise TestbedError(
                        f"testbed {self.run_id}: congestion_control {cc!r}: "
                        f"{r.stderr.strip()} (this kernel has loaded: {have})"
                    )
            self._shape(ns, "eth0", self.latency_s)  # what the host sends
            self._shape(br, port, 0.0)  # what the host receives

    # ------------------------------------------------------------------ queries
    @property
    def mtu(self) -> int:
        """MTU of every link, bytes (:attr:`Link.mtu`)."""
        return self.link.mtu

    @property
    def queue(self) -> str:
        """How each shaped NIC queues, ``"fair"`` or ``"fifo"`` (:attr:`Link.queue`)."""
        return self.link.queue

    @property
    def buffer_bytes(self) -> int | None:
        """Queue limit asked of every shaped NIC, bytes; None: the default
        (:attr:`Link.buffer_bytes`; :attr:`queue_limit_bytes` is what it holds)."""
        return self.link.buffer_bytes

    @property
    def queue_limit_bytes(self) -> int | None:
        """Bytes each shaped NIC's queue holds (see ``buffer_bytes``); None unshaped."""
        if self.bandwidth_bps is None:
            return None
        return tbf_params(self.bandwidth_bps, self.mtu, self.buffer_bytes)[1]

    def namespace(self, host: str) -> str:
        """Namespace name of ``host`` (``ps`` or ``w<k>``).

        Raises:
            KeyError: no such host in this testbed.
        """
        if host not in self._addresses:
            raise KeyError(f"testbed {self.run_id} has no host {host!r}; hosts: {self.hosts}")
        return f"{self.run_id}-{host}"

    def address(self, host: str) -> str:
        """IPv4 address of ``host``'s eth0 (reachable only from the testbed's namespaces).

        Raises:
            KeyError: no such host in this testbed.
        """
        self.namespace(host)
        return self._addresses[host]

    def qdisc_stats(self) -> dict[str, dict[str, int]]:
        """Counters of every shaping ``tbf`` (``tc -s``), per host and direction.

        Returns:
            ``{"<host>.out": {...}, "<host>.in": {...}}``, each with ``bytes``,
            ``packets``, ``drops`` and ``overlimits`` since the testbed was built
            (``out``: what the host sent, ``in``: what it received); empty when
            unshaped.
        """
        import json

        stats: dict[str, dict[str, int]] = {}
        if self.bandwidth_bps is None or self._closed:
            return stats
        for host in self.hosts:
            for key, ns, dev in (
                (f"{host}.out", self.namespace(host), "eth0"),
                (f"{host}.in", self.bridge_namespace, f"v{host}"),
            ):
                r = _run([self._tc, "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev])
                if r.returncode != 0:
                    continue
                for q in json.loads(r.stdout or "[]"):
                    if q.get("kind") == "tbf":
                        stats[key] = {
                            f: int(q.get(f, 0)) for f in ("bytes", "packets", "drops", "overlimits")
                        }
        return stats

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace this testbed created and has not removed yet."""
        return tuple(self._created)

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside ``host``'s namespace (``ip netns exec``)."""
        return [self._ip, "netns", "exec", self.namespace(host), *argv]

    def popen(
        self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside ``host``'s namespace via :func:`sgdsim.profiling.procs.spawn`.

        The process gets its own process group, is SIGKILLed when this process
        dies, and is stopped by :meth:`close`. stdout/stderr go to our stderr.

        Raises:
            TestbedError: the testbed is already closed.
        """
        if self._closed or self._closing:
            raise TestbedError(f"testbed {self.run_id} is closed")
        proc = spawn(self.exec_argv(host, argv), dict(env) if env is not None else None)
        self._procs.append(proc)
        return proc

    def capture(
        self, host: str, path: str, lifetime_s: float, payload: bool = False
    ) -> subprocess.Popen[bytes]:
        """Capture the TCP headers crossing ``host``'s bridge port into ``path`` (pcap;
        whole packets with ``payload``).

        ``tcpdump`` runs in the bridge namespace, niced, for at most
        ``lifetime_s`` seconds; :meth:`close` stops it like the other processes
        (:mod:`sgdsim.testbed.capture` reads the file).

        Raises:
            TestbedError: the testbed is already closed.
            KeyError: no such host.
            FileNotFoundError: ``tcpdump`` is not installed.
        """
        from sgdsim.testbed.capture import tcpdump_argv

        self.namespace(host)
        if self._closed or self._closing:
            raise TestbedError(f"testbed {self.run_id} is closed")
        argv = ["nice", "-n", "10", *tcpdump_argv(f"v{host}", path, lifetime_s, payload)]
        proc = spawn([self._ip, "netns", "exec", self.bridge_namespace, *argv], None)
        self._procs.append(proc)
        return proc

    def run(
        self, host: str, argv: Sequence[str], timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``host``'s namespace to completion, capturing text output.

        Raises:
            subprocess.TimeoutExpired: it ran longer than ``timeout_s`` seconds (killed).
        """
        return subprocess.run(
            self.exec_argv(host, argv), capture_output=True, text=True, timeout=timeout_s
        )

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Stop the processes started here and delete every namespace (so every link).

        Safe to call repeatedly, from a signal handler and at interpreter exit.
        Problems are reported on stderr, never raised (the original error wins).
        """
        if self._closed or self._closing:
            return
        self._closing = True
        try:
            for proc in self._procs:
                with contextlib.suppress(OSError):
                    stop(proc)
            for ns in reversed(list(self._created)):
                self._kill_leftovers(ns)
                r = _run([self._ip, "netns", "del", ns])
                if r.returncode == 0 or ns not in self._list_namespaces():
                    self._created.remove(ns)
                else:
                    print(
                        f"[testbed] could not delete namespace {ns}: {r.stderr.strip()}; "
                        f"remove it with `ip netns del {ns}`",
                        file=sys.stderr,
                        flush=True,
                    )
            if not self._created:
                self._record.unlink(missing_ok=True)
        finally:
            self._closed = True
            self._closing = False
            atexit.unregister(self.close)
            self._restore_handlers()
        if self._pending_signal is not None:
            sig, self._pending_signal = self._pending_signal, None
            self._raise_for(sig)

    def _kill_leftovers(self, ns: str) -> None:
        """SIGKILL processes still inside ``ns`` (all were started in our namespace)."""
        _kill_in(self._ip, ns)

    def _list_namespaces(self) -> list[str]:
        r = _run([self._ip, "netns", "list"])
        return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; close() is idempotent
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ signals
    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGINT, signal.SIGTERM):
            old = signal.getsignal(sig)
            if old is signal.SIG_IGN:
                continue
            self._old_handlers[sig] = old
            signal.signal(sig, self._on_signal)

    def _restore_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, old in self._old_handlers.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._closing:
            self._pending_signal = signum  # re-raised once close() is done
            return
        old = self._old_handlers.get(signum, signal.SIG_DFL)
        self.close()
        if callable(old) and old is not signal.default_int_handler:
            old(signum, frame)
            return
        self._raise_for(signum)

    @staticmethod
    def _raise_for(signum: int) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)
