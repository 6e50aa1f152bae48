"""sgdsim.hostcpu: the node's busy and stolen CPU shares from /proc/stat counters."""

from __future__ import annotations

import time

import pytest

from sgdsim.hostcpu import CPU_FIELDS, HostCpu, busy_steal, cpu_ticks, steal_warning


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
