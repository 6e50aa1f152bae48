"""Bounds and conversions the event simulation does not model event by event.

- **CPU.** The simulator times each worker's compute from the profile and the
  PS's update ops, but not the CPU that gRPC spends serializing, copying and
  receiving tensors. The profile measures every process's CPU seconds per step
  (``Workload.worker_cpu_s``, ``Workload.ps_cpu_s``); by the utilization law
  (Denning and Buzen, "The Operational Analysis of Queueing Network Models",
  ACM Computing Surveys 10(3), 1978: ``U = X · D``), a node with ``C`` cores
  carries at most ``C / D`` steps per second when each step costs it ``D``
  CPU seconds. :func:`cpu_bound_steps_per_s` gives that bound for a placement.
- **Protocol overhead.** A NIC's rate counts frames, the simulator moves tensor
  bytes. With a 1500-byte MTU, a TCP segment carries 1448 payload bytes
  (1500 − 20 IP − 20 TCP − 12 timestamp option) in a frame of 1514 bytes with
  its Ethernet header, 1538 bytes on a real wire with preamble, start
  delimiter, frame check sequence and inter-frame gap (IEEE 802.3).
"""

from __future__ import annotations

import math

import numpy as np

from sgdsim.simulation.workload import Network, Workload

#: Tensor bytes per byte of an Ethernet link rate (1448 / 1538): what a data sheet rate carries.
ETHERNET_PAYLOAD_FRACTION = 1448 / 1538


def tbf_payload_fraction(mtu: int = 1500) -> float:
    """Tensor bytes per byte of a ``tc tbf`` rate on links of MTU ``mtu`` bytes.

    A full TCP segment carries ``mtu − 52`` payload bytes (20 IP, 20 TCP and 12
    bytes of the timestamp option, on by default in Linux) in a frame of
    ``mtu + 14`` bytes that tbf counts (Ethernet header; no preamble, frame
    check sequence or gap on a veth): 1448 / 1514 at 1500, 8948 / 9014 at 9000.

    Raises:
        ValueError: ``mtu`` ≤ 52.
    """
    if mtu <= 52:
        raise ValueError(f"mtu must be > 52 bytes, got {mtu}")
    return (mtu - 52) / (mtu + 14)


def network_cpu_s_per_step(workload: Workload, network_cpu_s_per_byte: float) -> float:
    """CPU seconds per step the network path costs beyond loopback: every pulled and
    pushed byte of one step times ``network_cpu_s_per_byte``."""
    moved = float(workload.pull_bytes.sum() + workload.push_bytes.sum())
    return moved * network_cpu_s_per_byte


def compute_parallelism(workload: Workload) -> float | None:
    """Cores one worker's compute keeps busy while it computes, from the profile.

    The profile measures the worker process's CPU seconds per step
    (``worker_cpu_s``, every thread). Its per-step overhead and pull start
    (client, session, RPC set-up) run on about one core; the rest is the
    compute's, spread over ``compute_s`` seconds of compute:
    ``p = (worker_cpu_s − overhead_s − pull_start_s) / compute_s``, kept in
    ``[1, node_cores]``. None when the profile did not measure CPU.
    """
    c, dw = workload.node_cores, workload.worker_cpu_s
    if c is None or dw is None or c <= 0 or workload.compute_s <= 0:
        return None
    p = (dw - workload.overhead_s - workload.pull_start_s) / workload.compute_s
    return min(max(p, 1.0), float(c))


def background_cpu_s_per_step(workload: Workload, network_cpu_s_per_byte: float = 0.0) -> float:
    """CPU seconds per step a node running the PS and the workers (the testbed)
    spends on everything but the workers' compute: the workers' client and RPC
    threads, the PS (serving pulls and pushes, applying updates) and the
    network path's kernel work (:func:`network_cpu_s_per_step`). 0 when the
    profile did not measure CPU.
    """
    p = compute_parallelism(workload)
    dw, dp = workload.worker_cpu_s, workload.ps_cpu_s
    if p is None or dw is None or dp is None:
        return 0.0
    rest = dw + dp + network_cpu_s_per_step(workload, network_cpu_s_per_byte)
    return max(0.0, rest - p * workload.compute_s)


def compute_slots(
    workload: Workload,
    steps_per_s: float = 0.0,
    network_cpu_s_per_byte: float = 0.0,
    min_share: float = 0.1,
) -> float:
    """How many co-located workers compute at their profiled speed at once (> 0).

    The node's ``C`` cores serve the workers' compute, each keeping ``p``
    cores busy (:func:`compute_parallelism`), and, at ``steps_per_s`` (all
    workers), the background work of :func:`background_cpu_s_per_step`, which
    keeps ``u = steps_per_s · D_bg`` cores busy on average (utilization law,
    Denning and Buzen 1978). What is left is shared by the computing workers
    (processor sharing): ``(C − u) / p`` slots, at least ``min_share · C / p``.
    1 when the profile did not measure CPU (a worker's compute takes the node).
    """
    p, c = compute_parallelism(workload), workload.node_cores
    if p is None or c is None:
        return 1.0
    u = steps_per_s * background_cpu_s_per_step(workload, network_cpu_s_per_byte)
    return max(c - u, min_share * c) / p


def cpu_bound_steps_per_s(
    workload: Workload,
    workers: int,
    workers_per_node: int,
    ps_with_workers: bool = False,
    network_cpu_s_per_byte: float = 0.0,
) -> float:
    """Upper bound on steps/s (all workers) from the CPU cores of the nodes, or ``inf``.

    Args:
        workload: needs ``worker_cpu_s``, ``ps_cpu_s`` and ``node_cores`` (measured
            by the profile); any of them missing gives ``inf`` (no bound).
        workers: N.
        workers_per_node: workers placed on one node.
        ps_with_workers: the PS runs on the (single) workers' node, as in the
            testbed, so each step costs that node ``worker_cpu_s + ps_cpu_s``.
            Otherwise each of the ``ps_tasks`` PS nodes (same kind of node) carries
            its share of ``ps_cpu_s`` per step, and each worker node
            ``worker_cpu_s`` per step of each of its workers.
        network_cpu_s_per_byte: with ``ps_with_workers``, CPU seconds the node
            spends per byte moved beyond what the profile measured
            (:func:`network_cpu_s_per_step`).

    Returns:
        ``min`` over the nodes of cores / CPU seconds per step, in steps/s.

    Raises:
        ValueError: ``ps_with_workers`` with the workers on more than one node.
    """
    c, dw, dp = workload.node_cores, workload.worker_cpu_s, workload.ps_cpu_s
    if c is None or dw is None or dp is None or c <= 0:
        return math.inf
    nodes = -(-workers // workers_per_node)
    if ps_with_workers:
        if nodes != 1:
            raise ValueError("ps_with_workers needs every worker on one node")
        d = dw + dp + network_cpu_s_per_step(workload, network_cpu_s_per_byte)
        return c / d if d > 0 else math.inf
    ps_bound = c * workload.ps_tasks / dp if dp > 0 else math.inf
    node_bound = nodes * c / dw if dw > 0 else math.inf
    return min(ps_bound, node_bound)


def link_bound_steps_per_s(workload: Workload, network: Network) -> float:
    """Steps/s (all workers) the PS shards' NICs carry at most: min over shards and
    directions of capacity (bytes/s) / bytes per step (``inf``: no bytes).

    Every step pulls ``pull_bytes`` and pushes ``push_bytes`` through the NIC
    of the shard that holds each variable, one direction each.
    """
    per_shard = [
        np.bincount(shard, weights=nbytes, minlength=workload.ps_tasks)
        for shard, nbytes in (
            (workload.pulls_shard, workload.pull_bytes),
            (workload.pushes_shard, workload.push_bytes),
        )
    ]
    most = max(float(b.max()) for b in per_shard)
    return network.bandwidth_Bps / most if most > 0 else math.inf
