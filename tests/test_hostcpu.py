"""sgdsim.hostcpu and the measurements' CpuSampler: the node's busy and stolen CPU
shares from /proc/stat counters, and each measured process's CPU time per step."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sgdsim.hostcpu import (
    CPU_FIELDS,
    HostCpu,
    busy_s,
    busy_steal,
    cpu_ticks,
    process_cpu_s,
    steal_warning,
)
from sgdsim.testbed.run import CpuSampler


def ticks(**kw: int) -> dict[str, int]:
    return {f: kw.get(f, 0) for f in CPU_FIELDS}


def test_busy_and_steal_are_shares_of_all_cpu_time_between_two_readings():
    a = ticks(user=100, idle=100)
    # 200 ticks passed: 60 user, 20 system, 10 softirq, 80 idle, 30 stolen
    b = ticks(user=160, system=20, softirq=10, idle=180, steal=30)
    assert busy_steal(a, b) == pytest.approx((0.45, 0.15))
    assert busy_steal(a, a) is None  # no time passed


def test_the_warning_names_the_stage_only_above_the_mark():
    assert steal_warning("the profile of cpu/LeNet5", 0.05) is None
    assert steal_warning("the profile of cpu/LeNet5", None) is None
    text = steal_warning("the profile of cpu/LeNet5", 0.087)
    assert text is not None and "stole 8.7%" in text
    assert "the profile of cpu/LeNet5" in text


def test_a_block_of_work_reads_this_machines_counters():
    if cpu_ticks() is None:
        pytest.skip("no /proc/stat on this system")
    with HostCpu() as host:
        end = time.monotonic() + 0.3
        while time.monotonic() < end:  # busy: the shares cannot both be 0
            pass
    assert host.busy is not None and host.steal is not None
    assert 0.0 < host.busy <= 1.0 and 0.0 <= host.steal <= 1.0


_BUSY_CHILD = r"""
import sys, threading, time
stop = threading.Event()
for _ in range(100):  # idle threads, as a TensorFlow process has
    threading.Thread(target=stop.wait, daemon=True).start()
while time.process_time() < 0.3:  # 0.3 s of CPU on one thread
    pass
print("spun", flush=True)
sys.stdin.read()
"""


def test_process_cpu_counts_another_process_cpu_and_costs_the_reader_nothing():
    child = subprocess.Popen(
        [sys.executable, "-c", _BUSY_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "spun\n"
        cpu = process_cpu_s(child.pid)
        assert cpu is not None and 0.3 <= cpu < 0.6  # interpreter start-up included
        # a worker reads its own and the PS's clocks twice a step: 1,000 reads of a
        # 101-thread process must not add CPU to what the worker's figure counts
        me = time.process_time()
        for _ in range(1000):
            process_cpu_s(child.pid)
        assert time.process_time() - me < 0.05
    finally:
        child.kill()
        child.wait()
    assert process_cpu_s(child.pid) is None  # gone
    assert process_cpu_s(os.getpid()) == pytest.approx(time.process_time(), abs=0.01)


_SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


def test_the_sampler_splits_the_windows_cpu_per_step_by_process_and_ends_with_them():
    if cpu_ticks() is None:
        pytest.skip("no /proc/stat on this system")
    busy = subprocess.Popen([sys.executable, "-c", _SPIN.format(s=1.5)])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    try:
        with CpuSampler(0.05, pids={"worker": [busy.pid], "ps": [idle.pid]}) as cpu:
            start = time.time()
            time.sleep(1.0)
            end = time.time()
            busy.wait(timeout=10)  # samples after its end cannot read its clock
            time.sleep(0.2)
        # one thread spinning over the window at 10 steps/s: at most a core, 0.1 s of
        # CPU per step, and a good share of one even beside other tests on two cores
        split = cpu.cpu_per_step([(start, end, 10.0)])
        assert 0.03 < split["worker"] < 0.12
        assert split["ps"] == pytest.approx(0.0, abs=0.005)
        # the node's own busy time holds the spinner's: the rest is not negative, and
        # the three add up to the node's busy CPU seconds per step
        assert split["other"] > -0.01
        shares = cpu.fractions(start, end)
        assert shares is not None
        total = 10.0 * sum(split.values())
        assert total == pytest.approx(shares[0] * os.cpu_count(), rel=0.15)
        # a window that runs past the spinner's end still gives a split, from the
        # samples that read its clock; none without two of them or without steps
        assert cpu.cpu_per_step([(start, time.time(), 10.0)])["worker"] > 0.05
        assert cpu.cpu_per_step([(start, end, 0.0)]) == {}
        assert cpu.cpu_per_step([(end + 60, end + 61, 10.0)]) == {}
        # two windows (episodes) pool their CPU and their steps; an empty one adds nothing
        mid = (start + end) / 2
        both = cpu.cpu_per_step([(start, mid, 10.0), (mid, end, 10.0), (end + 60, end + 61, 1.0)])
        assert both["worker"] == pytest.approx(split["worker"], rel=0.2)
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()


def test_busy_seconds_count_every_busy_field_in_user_hz():
    hz = os.sysconf("SC_CLK_TCK")
    a = ticks(user=100, idle=100)
    b = ticks(user=100 + hz, system=hz, irq=hz, softirq=hz, idle=100 + 5 * hz, steal=hz)
    assert busy_s(a, b) == pytest.approx(4.0)
