"""The emulated network testbed: real namespaces, real tc shaping, real async TF training.

Tests that need root and iproute2 skip with the reason from ``check_available()``
when the testbed cannot run here, except under ``CI`` (which runs as root), where
they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from sgdsim.profiling import ProfileSpec
from sgdsim.simulation.bounds import tbf_payload_fraction
from sgdsim.testbed import (
    Link,
    MeasurementError,
    Testbed,
    TestbedError,
    TestbedUnavailable,
    check_available,
    run_async_measurement,
)
from sgdsim.testbed.netns import DEFAULT_MTU, PREFIX

pytestmark = pytest.mark.alone  # measures or times: `make test` runs it by itself (Makefile)

REASON = check_available()


@pytest.fixture
def testbed_ok() -> None:
    """Skip (or under CI fail) when the testbed cannot run on this machine."""
    if REASON is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to run the network testbed: {REASON}")
        pytest.skip(REASON)


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def ours(prefix: str = PREFIX) -> set[str]:
    return {n for n in namespaces() if n.startswith(prefix)} if REASON is None else set()


def one_tensor_workload(compute_s: float, tensor_bytes: float, update_s: float) -> Any:
    """A :class:`~sgdsim.simulation.Workload` of one compute segment and one
    tensor of ``tensor_bytes`` pulled before it and pushed after it."""
    import numpy as np

    from sgdsim.simulation import Workload

    return Workload(
        seg_dur_s=np.array([compute_s]),
        pull_bytes=np.array([tensor_bytes]),
        pull_gate=np.array([0]),
        push_bytes=np.array([tensor_bytes]),
        push_seg=np.array([0]),
        push_update_s=np.array([update_s]),
    )


def child_processes() -> list[str]:
    """sgdsim PS/worker processes started by this test process that are still alive."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True)
    mine = str(os.getpid())
    return [
        line for line in out.stdout.splitlines() if line.split()[1] == mine and "sgdsim." in line
    ]


def lenet(**kw: object) -> ProfileSpec:
    base: dict[str, object] = dict(
        model="LeNet5", batch_size=8, image_size=32, intra_op_threads=1, inter_op_threads=1
    )
    return ProfileSpec(**(base | kw))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- testbed


def test_check_available_gives_a_reason_or_none():
    assert REASON is None or (isinstance(REASON, str) and REASON)


def test_unprivileged_user_gets_a_clear_reason():
    code = (
        "import os\n"
        "from sgdsim.testbed import Testbed, TestbedUnavailable, check_available\n"
        "os.seteuid(65534)  # act as nobody (imports done as root)\n"
        "print(check_available())\n"
        "try:\n    Testbed(1)\nexcept TestbedUnavailable as e:\n    print('raised', e)\n"
    )
    if os.geteuid() != 0:
        assert REASON is not None and "root" in REASON
        with pytest.raises(TestbedUnavailable, match="root"):
            Testbed(1)
        return
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "needs root" in r.stdout
    assert "raised the network testbed needs root" in r.stdout


def test_namespaces_exist_inside_and_are_removed_on_exit_and_on_error(testbed_ok):
    before = ours()
    with Testbed(3, bandwidth_bps=50e6) as tb:
        names = {f"{tb.run_id}-{h}" for h in ("br", "ps", "w0", "w1", "w2")}
        assert names <= namespaces()
        assert set(tb.namespaces) == names
        assert tb.address("ps") != tb.address("w2")
        # addresses exist inside the testbed only, and hosts reach each other
        root_addrs = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
        assert tb.address("w0") not in root_addrs
        probe = "import socket; socket.create_connection((%r, 9), timeout=2)"
        r = tb.run("w0", [sys.executable, "-c", probe % tb.address("w1")], timeout_s=30)
        assert "ConnectionRefused" in r.stderr  # the host answered: a reset, not a timeout
        qdiscs = subprocess.run(
            ["tc", "-n", tb.namespace("w1"), "qdisc"], capture_output=True, text=True
        ).stdout
        assert "tbf" in qdiscs and "50Mbit" in qdiscs
        run_id = tb.run_id
    assert not {n for n in namespaces() if n.startswith(run_id)}
    tb.close()  # closing twice is harmless

    with pytest.raises(RuntimeError, match="boom"), Testbed(3) as tb2:
        run_id = tb2.run_id
        assert len([n for n in namespaces() if n.startswith(run_id)]) == 5
        raise RuntimeError("boom")
    assert not {n for n in namespaces() if n.startswith(run_id)}
    assert ours() == before


def test_sigterm_removes_the_testbed_and_restores_handlers(testbed_ok):
    old = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit), Testbed(1) as tb:
        run_id = tb.run_id
        assert signal.getsignal(signal.SIGTERM) != old
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises long before this ends
    assert not {n for n in namespaces() if n.startswith(run_id)}
    assert signal.getsignal(signal.SIGTERM) == old


CC_PROBE = """
import socket, subprocess, sys, time
peer = sys.argv[1]
if peer == "serve":
    s = socket.socket(); s.bind(("0.0.0.0", 7100)); s.listen()
    a, _ = s.accept(); a.recv(1); time.sleep(4)
else:
    for _ in range(200):  # the server may not listen yet
        try:
            c = socket.create_connection((peer, 7100), timeout=20); break
        except ConnectionRefusedError:
            time.sleep(0.05)
    c.sendall(b"x" * 100_000)
    time.sleep(4)
"""


def tcp_algorithms(tb: Any, host: str) -> set[str]:
    """Congestion controls of ``host``'s established TCP connections (``ss -ti``)."""
    out = subprocess.run(tb.exec_argv(host, ["ss", "-tin"]), capture_output=True, text=True)
    return set(re.findall(r"(\w+) wscale:", out.stdout))  # "[ts sack] cubic wscale:…"


def test_every_host_uses_the_congestion_control_it_is_given(testbed_ok):
    from sgdsim.testbed.netns import host_congestion_control

    default = host_congestion_control()
    for cc in (None, "reno", "cubic"):
        with Testbed(1, bandwidth_bps=100e6, link=Link(congestion_control=cc)) as tb:
            assert tb.congestion_control == (cc or default)
            server = tb.popen("ps", [sys.executable, "-c", CC_PROBE, "serve"])
            client = tb.popen("w0", [sys.executable, "-c", CC_PROBE, tb.address("ps")])
            deadline = time.monotonic() + 20
            while True:  # until the connection is up (both ends hold it 4 s unless stopped)
                seen = {h: tcp_algorithms(tb, h) for h in ("ps", "w0")}
                if all(seen.values()) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            for probe in (client, server):  # seen: no need to hold the connection longer
                probe.terminate()
                probe.wait(timeout=30)
            # both ends: the client's connect and the server's accepted socket
            assert seen == {"ps": {cc or default}, "w0": {cc or default}}, cc
    # the machine's own default is untouched
    assert host_congestion_control() == default


def test_an_unknown_congestion_control_says_what_the_kernel_has(testbed_ok):
    before = ours()
    with pytest.raises(TestbedError, match=r"nosuchcc.*this kernel has loaded: .*reno"):
        Testbed(1, bandwidth_bps=100e6, link=Link(congestion_control="nosuchcc"))
    assert ours() == before


def test_a_link_refuses_bad_values_before_anything_is_built():
    bad: list[tuple[dict[str, Any], str]] = [
        ({"mtu": 67}, r"mtu must be in 68\.\.65535 bytes, got 67"),
        ({"mtu": 65536}, "mtu must be in 68..65535 bytes"),
        ({"queue": "red"}, "queue must be one of fair, fifo, got 'red'"),
        ({"mtu": 1500, "buffer_bytes": 1513}, r"buffer_bytes must hold one frame \(1514 bytes\)"),
        ({"buffer_bytes": 5000}, r"one frame \(9014 bytes\), got 5000"),  # of the default MTU
        ({"congestion_control": "cubic; reboot"}, "congestion_control must be a name"),
        ({"congestion_control": ""}, "congestion_control must be a name"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            Link(**kwargs)
    ok = Link(mtu=1500, queue="fifo", buffer_bytes=1514, congestion_control="reno")
    assert (ok.mtu, ok.buffer_bytes) == (1500, 1514)  # one frame exactly
    assert Link() == Link(DEFAULT_MTU, "fair", None, None)


def test_latency_needs_netem(testbed_ok):
    reason = check_available(need_netem=True)
    if reason is not None:
        with pytest.raises(TestbedUnavailable, match="netem"):
            Testbed(1, latency_s=0.01)
        return
    with Testbed(1, bandwidth_bps=10e6, latency_s=0.01) as tb:
        q = subprocess.run(
            ["tc", "-n", tb.namespace("w0"), "qdisc"], capture_output=True, text=True
        ).stdout
        assert "netem" in q and "tbf" in q


RECEIVER = r"""
import json, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5201)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20)
n, t0 = 0, None
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(b)
print(json.dumps({"bytes": n, "seconds": time.monotonic() - t0}))
"""

SENDER = r"""
import socket, sys, time
host, seconds = sys.argv[1], float(sys.argv[2])
for _ in range(200):
    try:
        c = socket.create_connection((host, 5201), timeout=5)
        break
    except OSError:
        time.sleep(0.05)
buf = b"x" * (1 << 16)
end = time.monotonic() + seconds
while time.monotonic() < end:
    c.sendall(buf)
c.close()
"""


def tcp_throughput_bps(bandwidth_bps: float | None, seconds: float) -> float:
    """Goodput in bit/s of one TCP stream from w0 to ps inside a fresh testbed."""
    with Testbed(1, bandwidth_bps=bandwidth_bps) as tb:
        recv = subprocess.Popen(
            tb.exec_argv("ps", [sys.executable, "-c", RECEIVER]), stdout=subprocess.PIPE, text=True
        )
        try:
            s = tb.run("w0", [sys.executable, "-c", SENDER, tb.address("ps"), str(seconds)])
            assert s.returncode == 0, s.stderr
            out, _ = recv.communicate(timeout=30)
        finally:
            recv.kill()
            recv.wait()
    d = json.loads(out)
    return 8 * d["bytes"] / d["seconds"]


def test_shaping_limits_tcp_throughput(testbed_ok):
    rate = 20e6
    shaped = tcp_throughput_bps(rate, 4.0)
    unshaped = tcp_throughput_bps(None, 1.0)
    print(f"shaped {shaped / 1e6:.2f} Mbit/s, unshaped {unshaped / 1e6:.0f} Mbit/s")
    assert 0.75 * rate < shaped < 1.25 * rate
    assert unshaped > 3 * shaped


RACE_SERVER = r"""
import json, socket, sys, time
size, reps = int(sys.argv[1]), int(sys.argv[2])
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", 5202)); ls.listen(2); ls.settimeout(20)
conns = [ls.accept()[0] for _ in range(2)]
buf, starts = memoryview(b"x" * size), []
for _ in range(reps):
    for c in conns:
        c.setblocking(True); c.recv(1)
    starts.append(time.time())
    for c in conns:
        c.setblocking(False)
    sent = [0, 0]
    while min(sent) < size:  # both at once, as a PS answers two workers' pulls
        for i, c in enumerate(conns):
            if sent[i] < size:
                try:
                    sent[i] += c.send(buf[sent[i]:])
                except BlockingIOError:
                    pass
print(json.dumps(starts))
"""

RACE_CLIENT = r"""
import json, socket, sys, time
host, size, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(200):
    try:
        c = socket.create_connection((host, 5202), timeout=20); break
    except OSError:
        time.sleep(0.05)
ends = []
for _ in range(reps):
    time.sleep(0.1)
    c.send(b"g"); got = 0
    while got < size:
        got += len(c.recv(1 << 20))
    ends.append(time.time())
print(json.dumps(ends))
"""


def race(queue: str, size: int, reps: int, rate: float) -> list[tuple[float, float]]:
    """Seconds until each of two workers got ``size`` bytes the PS sent both at once."""
    with Testbed(2, bandwidth_bps=rate, link=Link(queue=queue)) as tb:
        argv = [sys.executable, "-c", RACE_SERVER, str(size), str(reps)]
        server = subprocess.Popen(tb.exec_argv("ps", argv), stdout=subprocess.PIPE, text=True)
        argv = [sys.executable, "-c", RACE_CLIENT, tb.address("ps"), str(size), str(reps)]
        clients = [
            subprocess.Popen(tb.exec_argv(w, argv), stdout=subprocess.PIPE, text=True)
            for w in ("w0", "w1")
        ]
        try:
            ends = [json.loads(c.communicate(timeout=60)[0]) for c in clients]
            starts = json.loads(server.communicate(timeout=10)[0])
        finally:
            for p in (server, *clients):
                p.kill()
                p.wait()
    return [(a - t, b - t) for t, a, b in zip(starts, *ends, strict=True)]


def test_fair_queue_shares_the_nic_between_peers_at_the_rate(testbed_ok):
    # 248 KB is one LeNet5 pull. The fair queue serves the two connections in
    # turns of one frame, so both finish together, at twice one transfer's time.
    # Not compared with a FIFO: at this size it often shares as evenly (one
    # run: 3 of 6 races within 0.5 ms, the fair queue's 2.6 to 5.5 ms apart).
    rate, size = 100e6, 248_000
    both = 2 * size / (rate / 8 * tbf_payload_fraction(DEFAULT_MTU))
    fair = race("fair", size, 8, rate)[2:]  # the first transfers grow TCP's windows
    print("fair", [f"{a * 1e3:.1f}/{b * 1e3:.1f}" for a, b in fair])
    for a, b in fair:
        assert min(a, b) > 0.75 * both and max(a, b) < 1.35 * both
        assert abs(a - b) < 0.25 * both


def test_fair_queue_has_a_class_per_peer_and_one_for_small_packets(testbed_ok):
    with Testbed(3, bandwidth_bps=50e6) as tb:
        for ns, dev, peers in (
            (tb.namespace("ps"), "eth0", 3),
            (tb.bridge_namespace, "vw1", 3),
            (tb.namespace("w2"), "eth0", 3),
        ):
            show = ["tc", "-n", ns, "class", "show", "dev", dev]  # no JSON for classes
            out = subprocess.run(show, capture_output=True, text=True).stdout
            htb = dict(re.findall(r"^class htb (20:\w+) .*?prio (\d+)", out, re.M))
            assert {h for h in htb if len(h) == 6} == {f"20:{100 + i}" for i in range(peers)}
            assert htb["20:10"] == "0" and htb["20:100"] == htb["20:11"] == "1"
        assert set(tb.qdisc_stats()) == {f"{h}.{d}" for h in tb.hosts for d in ("in", "out")}


# ----------------------------------------------------------------------------- training


@pytest.mark.slow
def test_two_async_workers_in_the_testbed(testbed_ok):
    before = ours()
    r = run_async_measurement(lenet(), 2, 100e6, duration_s=6, warmup_s=2)
    print(r)
    assert r.workers == 2 and not r.loopback and r.bandwidth_bps == 100e6
    # every worker ran its 3 warm-up steps before the window and 4 or more in it
    assert len(r.step_end_times) == 2
    for ends in r.step_end_times:
        assert sum(t < 0 for t in ends) >= 3 and sum(t >= 0 for t in ends) >= 4
        assert list(ends) == sorted(ends)
    assert r.steps_per_s > 0
    assert len(r.per_worker_steps_per_s) == 2 and min(r.per_worker_steps_per_s) > 0
    assert r.steps_per_s == pytest.approx(sum(r.per_worker_steps_per_s))
    assert len(r.steps_per_s_windows) == 4 and min(r.steps_per_s_windows) > 0
    assert r.window_s >= 5
    assert ours() == before
    assert child_processes() == []


@pytest.mark.slow
def test_episodes_start_each_worker_at_its_offset(testbed_ok):
    # two episodes; in the first, worker 1 starts 0.5 s after worker 0
    offsets = [[0.0, 0.5], [0.0, 0.0]]
    r = run_async_measurement(
        lenet(), 2, 100e6, duration_s=2, warmup_s=0, min_steps=3, start_offsets_s=offsets
    )
    assert r.start_offsets_s == ((0.0, 0.5), (0.0, 0.0))
    assert len(r.steps_per_s_windows) == 2 and min(r.steps_per_s_windows) > 0
    assert r.steps_per_s == pytest.approx(sum(r.steps_per_s_windows) / 2)
    assert r.window_s >= 2 * 2
    # times are relative to the first episode's window, which starts at its last
    # offset: in the 0.5 s before it worker 0 trained alone
    w0, w1 = r.step_end_times
    assert sum(-0.5 <= t < 0 for t in w0) >= 3
    assert not any(-0.5 <= t < 0 for t in w1)
    assert child_processes() == []


@pytest.mark.slow
def test_two_async_workers_on_loopback():
    r = run_async_measurement(lenet(), 2, None, duration_s=6, warmup_s=2, loopback=True)
    print(r)
    assert r.loopback and r.bandwidth_bps is None and r.workers == 2
    assert r.steps_per_s > 0 and min(r.per_worker_steps_per_s) > 0
    assert r.window_s >= 5
    assert child_processes() == []


@pytest.mark.slow
def test_failing_worker_ends_the_run_and_leaves_nothing(testbed_ok):
    before = ours()
    bad = lenet(model="NoSuchModel")  # ProfileSpec does not validate: the worker fails
    with pytest.raises(MeasurementError, match=r"worker process w\d exited with code 1"):
        run_async_measurement(bad, 2, 100e6, duration_s=5, warmup_s=1)
    assert ours() == before
    assert child_processes() == []


@pytest.mark.slow
def test_worker_killed_mid_run_ends_the_run_and_leaves_nothing(testbed_ok):
    before = ours()
    killed: list[int] = []

    def kill_w1_once_training() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for line in child_processes():
                if "sgdsim.testbed.worker" in line and "--task 1 " in line:
                    time.sleep(12)  # past TF start-up: training is under way
                    pid = int(line.split()[0])
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.2)

    t = threading.Thread(target=kill_w1_once_training, daemon=True)
    t.start()
    with pytest.raises(MeasurementError, match="worker process w1 was killed by SIGKILL"):
        run_async_measurement(lenet(), 2, 100e6, duration_s=20, warmup_s=1)
    t.join(timeout=5)
    assert killed
    assert ours() == before
    assert child_processes() == []


@pytest.mark.slow
def test_calibration_measures_the_testbeds_network_cpu_per_byte(testbed_ok):
    from sgdsim.testbed.calibrate import network_cpu_per_byte

    before = ours()
    r = network_cpu_per_byte(100e6, seconds=1.0)
    print(r)
    assert r.bytes_moved == 2 * 12_500_000  # 1 s at 100 Mbit/s, each way
    # the figure is the median of the repeats, each a measurement of its own
    runs = r.testbed_runs_s_per_byte
    assert len(runs) == 3 and r.testbed_s_per_byte == sorted(runs)[1]
    assert all(x > 0 for x in runs)
    # the shaped veth/bridge path costs the kernel CPU; loopback costs it less
    assert r.testbed_s_per_byte > 0 and r.loopback_s_per_byte >= 0
    assert r.extra_s_per_byte == max(0.0, r.testbed_s_per_byte - r.loopback_s_per_byte)
    assert r.testbed_s_per_byte < 1e-6  # under 1 µs per byte: a CPU cost, not wall time
    assert ours() == before
    assert child_processes() == []


def test_pull_race_measures_the_ps_join_delay_with_real_tensorflow(testbed_ok):
    from sgdsim.testbed.calibrate import pull_join_delay

    before = ours()
    r = pull_join_delay(100e6, reps=5)
    print(r)
    assert len(r.growth_s) == 5 and r.offset_s == pytest.approx(0.01)
    # four float32 variables, 25 ms worth at 100 Mbit/s less headers, pulled by each
    assert r.bytes_each % 16 == 0
    assert r.bytes_each == pytest.approx(
        0.025 * 100e6 / 8 * tbf_payload_fraction(DEFAULT_MTU), abs=16
    )
    # the second worker falls behind by more than it started behind, by a few ms
    # (processor sharing alone: by nothing); never by the whole transfer
    assert 0.0 <= r.delay_s < 0.025
    assert r.delay_s == max(0.0, statistics.median(r.growth_s))
    # one 100 ms tensor each: the PS does not hold the second pull until the first
    # one's tensor is through (that would be 60 ms late); it shares the NIC
    one = pull_join_delay(100e6, reps=3, transfer_s=0.1, tensors=1)
    assert one.bytes_each == pytest.approx(4 * r.bytes_each, abs=16)
    assert one.delay_s < 0.5 * 0.6 * 0.1
    assert ours() == before
    assert child_processes() == []


def test_push_race_sends_each_workers_tensors_to_the_ps_and_measures_the_lag(testbed_ok):
    from sgdsim.testbed.calibrate import push_join_delay

    before = ours()
    r = push_join_delay(100e6, reps=5)
    print(r)
    assert len(r.growth_s) == 5 and r.offset_s == pytest.approx(0.1)
    # four float32 tensors, 250 ms worth at 100 Mbit/s less headers, pushed by each
    assert r.bytes_each == pytest.approx(
        0.25 * 100e6 / 8 * tbf_payload_fraction(DEFAULT_MTU), abs=16
    )
    # the first's lead grows by less than the two pushes overlap (0.15 s)
    assert 0.0 <= r.delay_s < 0.15
    assert r.delay_s == max(0.0, statistics.median(r.growth_s))
    assert ours() == before
    assert child_processes() == []


def test_model_push_race_pushes_the_models_own_step_nearly_in_phase(testbed_ok):
    from sgdsim.testbed.calibrate import MODEL_PUSH_LAG_FRACTION, model_push_join_delay

    before = ours()
    pushes = [40_000.0] * 30 + [500_000.0] * 2  # 2.2 MB in 32 tensors: 0.18 s at the rate
    r = model_push_join_delay(100e6, pushes, reps=4)
    alone = sum(pushes) / (100e6 / 8 * tbf_payload_fraction(DEFAULT_MTU))
    assert len(r.growth_s) == 4
    # the lead given away on average, not the middle race's
    assert r.delay_s == pytest.approx(max(0.0, sum(r.growth_s) / 4))
    assert r.offset_s == pytest.approx(MODEL_PUSH_LAG_FRACTION * alone)
    assert r.bytes_each == pytest.approx(sum(pushes), abs=4 * 32)  # equal parts, whole floats
    # the lead cannot grow by more than the pushes overlap
    assert 0.0 <= r.delay_s < alone * (1 - MODEL_PUSH_LAG_FRACTION)
    assert ours() == before
    assert child_processes() == []


def test_join_races_reject_bad_arguments_before_starting_anything():
    import numpy as np

    from sgdsim.testbed.calibrate import join_delay, model_push_join_delay

    for lag in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="lag_fraction"):
            join_delay("push", 100e6, lag_fraction=lag)
    with pytest.raises(ValueError, match="statistic"):
        join_delay("push", 100e6, statistic="mode")
    with pytest.raises(ValueError, match="gap_s"):  # the next race would start inside this one
        join_delay("push", 100e6, transfer_s=0.25, gap_s=0.4)
    with pytest.raises(ValueError, match="at least one push"):
        model_push_join_delay(100e6, [])
    with pytest.raises(ValueError, match="at least one push"):
        model_push_join_delay(100e6, [0.0, 0.0])
    with pytest.raises(ValueError, match="at least one push"):
        model_push_join_delay(100e6, np.zeros(0))  # a workload's array, empty
    with pytest.raises(ValueError, match="bandwidth_bps"):
        model_push_join_delay(0.0, np.full(3, 1e5))


def test_rate_counts_whole_steps_inside_the_window():
    from sgdsim.testbed.run import summarize

    # worker 0 steps every 0.3 s, worker 1 every 0.5 s (ends at 0.3, 0.6, ...; 0.5, 1.0, ...);
    # window from 1 s after the last first step (0.5 + 1 = 1.5 s) to the first last step.
    w0 = [0.3 * k for k in range(1, 41)]  # ... 12.0 s
    w1 = [0.5 * k for k in range(1, 25)]  # ... 12.0 s
    total, per, window, sub = summarize([w0, w1], warmup_s=1.0, sub_windows=3)
    assert window == pytest.approx(12.0 - 1.5)
    # exact periods, although 10.5 s is not a whole number of 0.3 s steps
    assert per == pytest.approx((1 / 0.3, 1 / 0.5))
    assert total == pytest.approx(1 / 0.3 + 1 / 0.5)
    assert len(sub) == 3 and all(r > 0 for r in sub)
    with pytest.raises(MeasurementError, match="no common window"):
        summarize([[1.0, 2.0], [5.0, 6.0]], warmup_s=0.0)


def test_window_starts_after_every_workers_warm_up_steps():
    from sgdsim.testbed.run import summarize, window_start

    # three slow first steps (2 s each), then 1 s steps: with 3 warm-up steps the
    # window holds only steady steps and the rate is exactly 1 step/s per worker
    w0 = [2.0, 4.0, 6.0, *[6.0 + k for k in range(1, 11)]]  # ... 16.0
    w1 = [2.5, 4.5, 6.5, *[6.5 + k for k in range(1, 11)]]  # ... 16.5
    assert window_start([w0, w1], 0.0, 3) == 6.5
    assert window_start([w0, w1], 0.5, 1) == 3.0  # first step end + warmup_s
    total, per, window, _ = summarize([w0, w1], warmup_s=0.0, warmup_steps=3)
    assert window == pytest.approx(16.0 - 6.5)
    assert per == pytest.approx((1.0, 1.0))
    # counted from the first step, the slow steps drag the rate down
    slow, _, _, _ = summarize([w0, w1], warmup_s=0.0, warmup_steps=1)
    assert slow < 0.95 * total
    with pytest.raises(MeasurementError, match="before its 3 warm-up"):
        summarize([w0, [1.0, 2.0]], warmup_s=0.0, warmup_steps=3)


def test_saturation_point_is_the_smallest_n_no_larger_n_beats_by_ten_percent():
    from sgdsim.reports import saturation_n

    assert saturation_n([1, 2, 3, 4], [0.63, 0.83, 1.00, 0.99]) == 3  # DESIGN.md's run
    assert saturation_n([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0]) is None
    assert saturation_n([4, 1, 2], [2.0, 1.0, 2.05]) == 2  # unordered input
    # a pair locked in phase gains 9 % over one worker, three workers 37 %: not saturated at 1
    assert saturation_n([1, 2, 3, 4], [0.506, 0.553, 0.694, 0.729]) == 3
    # a dip at N = 3 does not hide N = 4's gain over N = 2: still growing
    assert saturation_n([1, 2, 3, 4], [1.0, 1.5, 1.4, 1.8]) is None


def test_validation_points_expand_networks_policies_and_n():
    from sgdsim.config import validation_points

    cfg = {
        "validation": {
            "hardware": "cpu",
            "duration_s": 20,
            "networks": [{"name": "a", "bandwidth_bps": 1e8}, {"name": "b", "bandwidth_bps": 2e8}],
            "points": [
                {"model": "M", "workers": [1, 2], "policies": ["tf_default", "tictac"]},
                {"model": "L", "workers": [3], "networks": ["b"], "duration_s": 5, "runs": 3},
                {"model": "M", "workers": [1], "networks": ["a"]},  # duplicate of the first
            ],
        }
    }
    pts = validation_points(cfg)
    assert len(pts) == 2 * 2 * 2 + 1
    assert {
        (p["model"], p["network"], p["policy"], p["workers"]) for p in pts if p["model"] == "L"
    } == {("L", "b", "tf_default", 3)}
    assert {p["duration_s"] for p in pts} == {20, 5}
    # an asynchronous entry's launches too (each launch one draw of the workers' phases)
    assert {(p["model"], p["mode"], p["runs"]) for p in pts} == {
        ("M", "async", 1),
        ("L", "async", 3),
    }


def test_an_entry_may_measure_its_points_in_steady_state():
    # validation.points[].protocol: one run keeps a few steady points beside its episodes
    from sgdsim.config import validation_points, with_defaults
    from sgdsim.pipeline.validation import steady_rule

    cfg = {
        "models": [{"name": "M"}],
        "hardware": [{"name": "cpu"}],
        "networks": [{"name": "n", "bandwidth_bps": 1e9}],
        "validation": {
            "networks": [{"name": "a", "bandwidth_bps": 1e8}],
            "steady": {"min_steps": 7},
            "points": [
                {"model": "M", "workers": [1, 2]},
                {"model": "M", "workers": [4], "protocol": "steady"},
            ],
        },
    }
    cfg = with_defaults(cfg)
    by_n = {p["workers"]: p["protocol"] for p in validation_points(cfg)}
    assert by_n == {1: "episodes", 2: "episodes", 4: "steady"}

    def wc(n: int) -> dict[str, str]:
        return {"model": "M", "network": "a", "policy": "tf_default", "workers": str(n)}

    assert steady_rule(cfg, wc(2)) is None
    rule = steady_rule(cfg, wc(4))
    assert rule is not None and rule.min_steps == 7
    # its own warm-up (validation.steady.warmup_steps), not the episodes' 3
    assert rule.warmup_steps == 1 and cfg["validation"]["warmup_steps"] == 3
    assert steady_rule(cfg) is None  # validation.protocol stays episodes
    cfg["validation"]["protocol"] = "steady"  # entries without their own follow it ...
    assert steady_rule(cfg, wc(2)) is not None
    cfg["validation"]["points"][0]["protocol"] = "episodes"  # ... and their own wins
    assert steady_rule(cfg, wc(2)) is None and steady_rule(cfg, wc(4)) is not None


def test_an_entry_may_take_keys_of_the_steady_rule_of_its_own():
    # validation.points[].steady: a pair measured longer, one worker shorter, the rest shared
    from sgdsim.config import check_config, validation_points, with_defaults
    from sgdsim.errors import ConfigError
    from sgdsim.pipeline.validation import steady_rule

    cfg = {
        "models": [{"name": "LeNet5"}],
        "hardware": [{"name": "cpu"}],
        "networks": [{"name": "n", "bandwidth_bps": 1e9}],
        "validation": {
            "protocol": "steady",
            "networks": [{"name": "a", "bandwidth_bps": 1e8}],
            "steady": {"min_steps": 20, "max_s": 90, "settle_s": 3},
            "points": [
                {"model": "LeNet5", "workers": [2], "steady": {"max_s": 240}},
                {"model": "LeNet5", "workers": [1], "steady": {"min_steps": 10}},
                {"model": "LeNet5", "workers": [1, 2, 3]},  # 1 and 2 listed: the first wins
            ],
        },
    }
    cfg = with_defaults(cfg)
    # the entry's own keys are not filled with the schema's defaults
    assert cfg["validation"]["points"][0]["steady"] == {"max_s": 240}
    assert {p["workers"]: p["steady"] for p in validation_points(cfg)} == {
        2: {"max_s": 240},
        1: {"min_steps": 10},
        3: {},
    }

    def rule(n: int):
        wc = {"model": "LeNet5", "network": "a", "policy": "tf_default", "workers": str(n)}
        return steady_rule(cfg, wc)

    assert (rule(2).max_s, rule(2).min_steps, rule(2).settle_s) == (240, 20, 3)
    assert (rule(1).max_s, rule(1).min_steps, rule(1).settle_s) == (90, 10, 3)
    assert (rule(3).max_s, rule(3).min_steps) == (90, 20)
    # a key the rule does not have, or a bad value, is refused naming the entry
    for bad in ({"max_seconds": 240}, {"max_s": 0}):
        cfg["validation"]["points"][0]["steady"] = bad
        with pytest.raises(ConfigError, match=r"validation\.points\[0\]\.steady"):
            with_defaults(cfg)
    # an episodes entry takes no steady rule
    cfg["validation"]["points"][0]["steady"] = {"max_s": 240}
    cfg["validation"]["points"][0]["protocol"] = "episodes"
    with pytest.raises(ConfigError, match=r"points\[0\]\.steady: .*episodes"):
        check_config(cfg)


def test_an_entry_s_steady_keys_are_the_rule_s():
    # the schema lists validation.points[].steady's keys by hand (each a $ref without its
    # default); a key added to the rule must be added there too
    from sgdsim.config import schema

    sc = schema()
    entry = sc["properties"]["validation"]["properties"]["points"]["items"]["properties"]
    assert set(entry["steady"]["properties"]) == set(sc["$defs"]["steady_rule"]["properties"])


@pytest.mark.slow
def test_without_the_testbed_loopback_mode_measures_unshaped_and_says_so(tmp_path, monkeypatch):
    # validation.unprivileged: loopback. Where the testbed cannot run (here: made
    # to report a reason), the point is measured for real on 127.0.0.1, unshaped,
    # and recorded with the reason; with `skip` it is recorded as skipped.
    import polars as pl

    import sgdsim.testbed
    from sgdsim.pipeline.validation import measure_stage

    monkeypatch.setattr(sgdsim.testbed, "check_available", lambda **_: "no root (test)")
    # the point's start offsets come from the profile: a 20 ms step on a 1 GB/s fit
    workload = tmp_path / "LeNet5.json"
    one_tensor_workload(0.02, 2.5e5, 1e-4).save(str(workload))
    tables = tmp_path / "tables"
    tables.mkdir()
    pl.DataFrame({"profile_bandwidth_Bps": [1e9]}).write_parquet(tables / "profile.parquet")
    config = {
        "models": [{"name": "LeNet5", "batch_size": 8, "image_size": 32, "classes": 10}],
        "hardware": [{"name": "cpu", "intra_op_threads": 1, "inter_op_threads": 1}],
        "networks": [{"name": "1Gbps", "bandwidth_bps": 1e9}],
        "profile": {},
        "validation": {
            "hardware": "cpu",
            "duration_s": 2,
            "warmup_s": 0.5,
            "episodes": 2,
            "unprivileged": "loopback",
            "networks": [{"name": "100Mbps", "bandwidth_bps": 1e8}],
            "points": [{"model": "LeNet5", "workers": [2]}],
        },
    }
    wc = {"hardware": "cpu", "model": "LeNet5", "network": "100Mbps", "policy": "tf_default"}
    out = tmp_path / "w2.parquet"
    measure_stage(config, str(workload), str(tables), str(out), wc | {"workers": "2"})
    row = pl.read_parquet(out).to_dicts()[0]
    assert row["status"] == "ok" and row["loopback"] and row["reason"] == "no root (test)"
    assert row["steps_per_s"] > 0 and len(row["per_worker_steps_per_s"]) == 2
    # two episodes, each from its offsets: worker 0 at 0, worker 1 within one step
    # (0.02 s compute + 0.5 MB at 1 GB/s = 0.0205 s)
    assert row["episodes"] == 2 and len(row["steps_per_s_windows"]) == 2
    offsets = row["start_offsets_s"]
    assert len(offsets) == 2 and all(o[0] == 0 and 0 <= o[1] < 0.0205 for o in offsets)
    assert row["steps_per_s"] == pytest.approx(sum(row["steps_per_s_windows"]) / 2)
    assert row["shaper_drops"] == 0  # nothing shaped
    assert child_processes() == []
    config["validation"]["unprivileged"] = "skip"
    measure_stage(config, str(workload), str(tables), str(out), wc | {"workers": "2"})
    row = pl.read_parquet(out).to_dicts()[0]
    assert row["status"] == "skipped" and row["reason"] == "no root (test)"
    assert "steps_per_s" not in row  # nothing was measured


def test_validation_offsets_are_seeded_per_point_and_within_one_step():
    from sgdsim.pipeline.validation import validation_offsets
    from sgdsim.simulation import Network
    from sgdsim.simulation.async_ps import single_step_estimate

    w = one_tensor_workload(0.1, 1e6, 1e-3)
    net = Network(1e7, 0.0)
    t1 = single_step_estimate(w, net)  # 0.1 + 2 MB / 10 MB/s = 0.3 s
    config = {"seed": 7, "validation": {"episodes": 4}}
    point = {"model": "M", "network": "n", "policy": "tf_default", "workers": "3"}
    rows = validation_offsets(config, w, net, point)
    assert len(rows) == 4 and all(len(r) == 3 and r[0] == 0.0 for r in rows)
    assert all(0 <= x < t1 for r in rows for x in r)
    assert len({tuple(r) for r in rows}) == 4  # each episode its own phases
    assert validation_offsets(config, w, net, point) == rows  # same seed and point
    assert validation_offsets(config, w, net, point | {"network": "m"}) != rows
    assert validation_offsets({**config, "seed": 8}, w, net, point) != rows
    assert validation_offsets(config, w, net, point | {"workers": "1"}) == [[0.0]]


def test_a_worker_stops_where_the_measured_worker_would():
    from sgdsim.protocol import episode_done, episode_stop, episode_train_s

    # the largest offset of any episode extends every episode's training
    assert episode_train_s(0.5, 4.0, [[0.0, 0.2], [0.0, 0.7]]) == pytest.approx(5.2)
    ends = [0.4, 0.9, 1.4, 1.9, 2.4]
    # started at 0.3: trained 1.5 s once its step ending at 1.9 is done ...
    assert episode_stop(ends, 0.3, 1.5, 1) == 4
    # ... unless it must run 5 steps; 6 steps are never reached here
    assert episode_stop(ends, 0.3, 1.5, 5) == 5
    assert episode_stop(ends, 0.3, 1.5, 6) == -1
    assert episode_stop(ends, 0.3, 9.0, 1) == -1
    for min_steps in (0, 1, 3, 5):  # the index is where the workers' own test first holds
        n = episode_stop(ends, 0.3, 1.5, min_steps)
        assert episode_done(ends[:n], 0.3, 1.5, min_steps)
        assert not any(episode_done(ends[:k], 0.3, 1.5, min_steps) for k in range(n))


def test_simulated_episodes_are_scored_over_the_measured_window_by_hand():
    from sgdsim.simulation import Network
    from sgdsim.simulation.protocols import simulate_episodes

    # compute-bound: 0.1 s steps, 1 kB each way on a 1 TB/s NIC
    w = one_tensor_workload(0.1, 1e3, 0.0)
    net = Network(1e12, 0.0)
    # worker 1 starts 0.05 s late; both train 0.3 + 1.0 + 0.05 s, so worker 0's
    # steps end at 0.1, ..., 1.4 and worker 1's at 0.15, ..., 1.45; the window
    # is [0.35, 1.4]: 10 steps in 1.0 s and 9 in 0.9 s, 10 steps/s each
    r = simulate_episodes(w, net, 2, [[0.0, 0.05]], 0.3, 1.0, 2)
    assert r.steps_per_s == pytest.approx(20.0, rel=1e-6)
    assert r.replications == 1 and r.steps_per_s_std == 0.0
    assert r.samples_per_s == pytest.approx(r.steps_per_s * w.batch_size)
    # min_steps longer than the window still runs (a short simulation is lengthened)
    assert simulate_episodes(w, net, 1, [[0.0]], 0.0, 0.05, 40).steps_per_s == pytest.approx(10.0)
    with pytest.raises(ValueError, match="2 offsets"):
        simulate_episodes(w, net, 2, [[0.0]], 0.3, 1.0, 2)
    with pytest.raises(ValueError, match="at least one episode"):
        simulate_episodes(w, net, 2, [], 0.3, 1.0, 2)


def test_each_simulated_episode_keeps_its_own_phase():
    from sgdsim.simulation import Network
    from sgdsim.simulation.protocols import simulate_episodes

    # communication-bound: 10 ms compute, 1 MB each way at 10 MB/s; two workers
    # that pull and push together share the NIC; half a step apart, they alternate
    w = one_tensor_workload(0.01, 1e6, 0.0)
    net = Network(1e7, 0.0)
    args = (0.5, 3.0, 3)
    together = simulate_episodes(w, net, 2, [[0.0, 0.0]], *args).steps_per_s
    apart = simulate_episodes(w, net, 2, [[0.0, 0.105]], *args).steps_per_s
    assert apart > 1.5 * together
    both = simulate_episodes(w, net, 2, [[0.0, 0.0], [0.0, 0.105]], *args)
    assert both.replications == 2
    assert both.steps_per_s == pytest.approx((together + apart) / 2)
    assert both.steps_per_s_std > 0


def test_a_validation_network_sets_its_own_queueing_regime(tmp_path):
    from sgdsim.config import with_defaults
    from sgdsim.pipeline.validation import (
        _testbed_network,
        _validation_buffer,
        _validation_mtu,
        _validation_queue,
        validation_link,
    )
    from sgdsim.testbed.netns import tbf_params

    plain = {"name": "plain", "bandwidth_bps": 1e8}
    shallow = {**plain, "name": "shallow", "mtu": 1500, "queue": "fifo", "buffer_bytes": 62_500}
    shallow["congestion_control"] = "reno"
    config = with_defaults(
        {
            "models": [{"name": "LeNet5"}],
            "hardware": [{"name": "cpu"}],
            "networks": [{"name": "n", "bandwidth_bps": 1e9}],
            "validation": {"queue": "fair", "mtu": 9000, "networks": [plain, shallow]},
        }
    )
    plain, shallow = config["validation"]["networks"]
    assert (_validation_mtu(config, plain), _validation_queue(config, plain)) == (9000, "fair")
    assert _validation_buffer(config, plain) == tbf_params(1e8, 9000, None)[1]
    assert (_validation_mtu(config, shallow), _validation_queue(config, shallow)) == (1500, "fifo")
    assert _validation_buffer(config, shallow) == 62_500
    assert validation_link(config, plain) == Link(9000, "fair", None, None)  # None: defaults
    assert validation_link(config, shallow) == Link(1500, "fifo", 62_500, "reno")
    # the prediction sees each network's own frames
    for net, mtu in ((plain, 9000), (shallow, 1500)):
        seen = _testbed_network(config, net, str(tmp_path))
        assert seen.bandwidth_Bps == pytest.approx(1e8 / 8 * tbf_payload_fraction(mtu))


def test_calibration_builds_the_nics_its_network_measures_on(testbed_ok, monkeypatch):
    import sgdsim.testbed.calibrate as calibrate
    from sgdsim.testbed.netns import Testbed

    limits: list[tuple[str, int | None]] = []

    class Spy(Testbed):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            limits.append((self.queue, self.queue_limit_bytes))

    monkeypatch.setattr(calibrate, "Testbed", Spy)
    r = calibrate.network_cpu_per_byte(
        1e8, seconds=0.2, link=Link(mtu=1500, queue="fifo", buffer_bytes=62_500)
    )
    assert r.bytes_moved > 0 and limits == [("fifo", 62_500)]


def test_a_step_tensorflow_aborts_is_run_again_a_few_times():
    from sgdsim.testbed.worker import ABORT_RETRIES, run_step

    class Aborted(Exception):
        pass

    class Session:  # aborts the first `fails` runs, as a duplicated RunGraph does
        def __init__(self, fails: int) -> None:
            self.fails, self.runs = fails, 0

        def run(self, op: object) -> None:
            self.runs += 1
            if self.runs <= self.fails:
                raise Aborted("The same RunGraph (Worker) request was received twice.")

    s = Session(ABORT_RETRIES)
    run_step(s, "train", Aborted, 0)
    assert s.runs == ABORT_RETRIES + 1
    with pytest.raises(Aborted):
        run_step(Session(ABORT_RETRIES + 1), "train", Aborted, 0)
    with pytest.raises(ValueError):  # other errors are not retried
        run_step(type("S", (), {"run": lambda self, op: int("x")})(), "train", Aborted, 0)


def test_a_capture_of_the_ps_port_sees_both_directions_of_a_transfer(testbed_ok, tmp_path):
    from sgdsim.testbed.calibrate import _transfer
    from sgdsim.testbed.capture import read_pcap

    size = 3_000_000
    path = tmp_path / "ps.pcap"
    with Testbed(workers=1, bandwidth_bps=100e6) as tb:
        cap = tb.capture("ps", str(path), lifetime_s=60)
        time.sleep(1.0)  # tcpdump listening
        t0 = time.time()
        _transfer(size, tb, timeout_s=60)
        t1 = time.time()
        time.sleep(0.5)
    assert cap.poll() is not None  # stopped with the testbed
    p = read_pcap(path)
    ps, w0 = (int(tb.address(h).rsplit(".", 1)[1]) for h in ("ps", "w0"))
    for src, dst in ((ps, w0), (w0, ps)):  # every byte each way, while the transfer ran
        m = (p.src == src) & (p.dst == dst)
        # every byte once, plus what the shapers' drops made TCP resend (17 % seen
        # on a slow VM); a packet captured twice would double the sum
        assert size <= p.payload[m].sum() < 2 * size
        assert t0 <= p.t[m].min() and p.t[m].max() <= t1
    assert not any(n.startswith(tb.run_id) for n in namespaces())


def test_a_testbed_process_does_not_import_the_simulator():
    # every PS and worker of every launch imports sgdsim: the simulator's compiled
    # loops (numba) would cost each one ~0.7 s of CPU the launch's startup shares
    code = (
        "import sys, sgdsim.testbed.worker, sgdsim.profiling.server\n"
        "print(sorted(m for m in ('numba', 'sgdsim.simulation') if m in sys.modules))\n"
        "from sgdsim import Workload\n"  # the package's API still there on first use
        "print(Workload.__module__, 'numba' in sys.modules)\n"
        "import sgdsim\n"
        "try:\n    sgdsim.nothing\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [
        "[]",
        "sgdsim.simulation.workload True",
        "module 'sgdsim' has no attribute 'nothing'",
    ]
