"""Synchronous SGD on the event loop: ``sync_ps`` and ``allreduce`` modes."""

from __future__ import annotations

from dataclasses import dataclass

from sgdsim.simulation.workload import Network

#: Synchronous modes and the fusion rules of ``allreduce`` (the config's ``fusions``).
SYNC_MODES = ("sync_ps", "allreduce")
FUSIONS = ("single", "none", "buckets", "horovod", "mgwfbp")


@dataclass(frozen=True)
class CollectiveSettings:
    """How ``allreduce`` mode groups and reduces gradients (config ``simulation.allreduce``).

    Attributes:
        algorithm: ``ring`` (one flat ring) or ``hierarchical`` (reduce-scatter in
            each node, ring between nodes, all-gather in each node).
        bucket_bytes, first_bucket_bytes: caps of fusion ``buckets``, bytes.
        horovod_fusion_bytes: fusion buffer of fusion ``horovod``, bytes.
        horovod_cycle_s: cycle time of fusion ``horovod``, seconds.
        message_overhead_s: software cost of one ring message, seconds (added to
            the network's latency to make α).
        gpus_per_node: workers per node (≥ 1).
        intra_node: the interconnect between the workers of one node (None: the network's NIC).
    """

    algorithm: str = "ring"
    bucket_bytes: float = 25 * 2**20
    first_bucket_bytes: float = 2**20
    horovod_fusion_bytes: float = 64 * 2**20
    horovod_cycle_s: float = 0.005
    message_overhead_s: float = 0.0
    gpus_per_node: int = 1
    intra_node: Network | None = None
