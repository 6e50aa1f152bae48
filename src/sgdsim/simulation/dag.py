"""The DAG model of one synchronous SGD iteration, and how gradients are grouped.

Closed forms that the event simulation of synchronous SGD must reproduce where
their assumptions hold (no contention, one communication channel), and the
grouping rules that decide which gradients are reduced together:

- :func:`ring_allreduce_s`: the α–β cost of a ring all-reduce.
- :func:`wfbp_iteration`: wait-free back-propagation (WFBP) as a DAG (Shi,
  Wang, Chu, Li, "A DAG Model of Synchronous Stochastic Gradient Descent in
  Distributed Deep Learning", ICPADS 2018, arXiv 1805.03812, §IV).
- :func:`mgwfbp_groups`: MG-WFBP's merge of layers into groups (Shi, Chu, Li,
  "MG-WFBP: Efficient Data Communication for Distributed Synchronous SGD
  Algorithms", INFOCOM 2019), as its authors' release applies the rule.
- :func:`fixed_buckets`: PyTorch DDP's buckets of a size cap in reverse
  production order (``bucket_cap_mb`` 25, first bucket 1 MiB).

Layers are numbered 0 … L−1 in forward order; back-propagation runs from
layer L−1 down to 0. Times in seconds, sizes in bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: PyTorch DDP's default bucket cap and its first (smaller) bucket, bytes.
DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 2**20


def ring_allreduce_s(nbytes: float, workers: int, alpha_s: float, beta_s_per_byte: float) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` over ``workers`` ranks:
    ``2(P−1)α + 2(P−1)/P · bytes · β``.

    Reduce-scatter then all-gather, each P−1 steps moving ``bytes / P`` per
    rank (Patarasuk, Yuan, "Bandwidth optimal all-reduce algorithms for
    clusters of workstations", JPDC 69(2), 2009; Thakur, Rabenseifner, Gropp,
    IJHPCA 19(1), 2005). One rank reduces nothing: 0 s.

    Args:
        nbytes: bytes of the reduced tensor or bucket (≥ 0).
        workers: P ≥ 1.
        alpha_s: per-message latency α, seconds.
        beta_s_per_byte: transfer time β per byte, seconds (1 / bytes/s).

    Raises:
        ValueError: P < 1, negative bytes, α or β.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if nbytes < 0 or alpha_s < 0 or beta_s_per_byte < 0:
        raise ValueError("nbytes, alpha_s and beta_s_per_byte must be >= 0")
    p = workers
    return 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * nbytes * beta_s_per_byte


@dataclass(frozen=True)
class WfbpTimes:
    """Start times of one iteration's backward and communication tasks (seconds
    from the start of back-propagation), and the iteration's length.

    Attributes:
        tau_b: (L,) start of each layer's backward computation.
        tau_c: (L,) start of each layer's gradient communication.
        iteration_s: ``τc[0] + tc[0]`` plus the update and the next forward.
    """

    tau_b: tuple[float, ...]
    tau_c: tuple[float, ...]
    iteration_s: float


def wfbp_iteration(
    tb: Sequence[float], tc: Sequence[float], update_s: float = 0.0, forward_s: float = 0.0
) -> WfbpTimes:
    """One WFBP iteration on one communication channel (Shi et al. 2018, §IV):

    ``τb[L−1] = 0``, ``τb[l] = τb[l+1] + tb[l+1]``;
    ``τc[L−1] = τb[L−1] + tb[L−1]``,
    ``τc[l] = max(τc[l+1] + tc[l+1], τb[l] + tb[l])``;
    iteration = ``τc[0] + tc[0] + update_s + forward_s``.

    A layer's gradient is communicated as soon as it is computed and the
    channel has finished the previous layer's.

    Args:
        tb: (L,) backward time of each layer, seconds.
        tc: (L,) communication time of each layer's gradient, seconds (0 for a
            layer without parameters, or merged into the next lower layer).
        update_s, forward_s: the update and the next forward pass, seconds.

    Raises:
        ValueError: ``tb`` and ``tc`` differ in length or are empty.
    """
    n = len(tb)
    if n == 0 or len(tc) != n:
        raise ValueError(f"need tb and tc of one length >= 1, got {len(tb)} and {len(tc)}")
    tau_b = [0.0] * n
    for layer in range(n - 2, -1, -1):
        tau_b[layer] = tau_b[layer + 1] + tb[layer + 1]
    tau_c = _comm_starts(tb, tc, tau_b)
    return WfbpTimes(tuple(tau_b), tuple(tau_c), tau_c[0] + tc[0] + update_s + forward_s)


def _comm_starts(tb: Sequence[float], tc: Sequence[float], tau_b: Sequence[float]) -> list[float]:
    n = len(tb)
    tau_c = [0.0] * n
    tau_c[n - 1] = tau_b[n - 1] + tb[n - 1]
    for layer in range(n - 2, -1, -1):
        tau_c[layer] = max(tau_c[layer + 1] + tc[layer + 1], tau_b[layer] + tb[layer])
    return tau_c


def mgwfbp_groups(
    tb: Sequence[float],
    nbytes: Sequence[float],
    comm_s: Callable[[float], float],
    alpha_s: float,
) -> list[list[int]]:
    """MG-WFBP's groups of layers, each all-reduced as one message.

    Going from layer L−1 down to 1, layer ``l`` (with everything merged into
    it) merges into ``l − 1`` when ``l − 1``'s gradient is ready
    (``τb[l−1] + tb[l−1]``) before ``l``'s communication would end
    (``τc[l] + tc[l]``), and either ``l``'s communication has not started by
    then (``τc[l]`` later than that) or the wait for it is shorter than the
    start-up cost ``α`` the merge saves; ``τc`` is recomputed after every
    merge (Shi, Chu, Li, INFOCOM 2019, as their release's
    ``_generate_groups_mgwfbp`` applies it).

    Args:
        tb: (L,) backward time of each layer, seconds.
        nbytes: (L,) gradient bytes of each layer.
        comm_s: seconds to all-reduce a message of that many bytes (e.g.
            :func:`ring_allreduce_s` at the cluster's P, α and β); a layer
            without gradient bytes sends nothing.
        alpha_s: the start-up cost one message saves, seconds.

    Returns:
        Groups of layer indices, in the order they are communicated (from the
        last layer down), each in descending layer order.

    Raises:
        ValueError: ``tb`` and ``nbytes`` differ in length or are empty.
    """
    n = len(tb)
    if n == 0 or len(nbytes) != n:
        raise ValueError(f"need tb and nbytes of one length >= 1, got {len(tb)}, {len(nbytes)}")
    size = list(map(float, nbytes))
    tc = [comm_s(b) if b > 0 else 0.0 for b in size]
    tau_b = [0.0] * n
    for layer in range(n - 2, -1, -1):
        tau_b[layer] = tau_b[layer + 1] + tb[layer + 1]
    tau_c = _comm_starts(tb, tc, tau_b)
    groups: list[list[int]] = []
    group: list[int] = []
    for layer in range(n - 1, 0, -1):
        group.append(layer)
        ready = tau_b[layer - 1] + tb[layer - 1]
        merge = ready < tau_c[layer] + tc[layer] and (
            tau_c[layer] > ready or ready - tau_c[layer] < alpha_s
        )
        if merge:
            size[layer - 1] += size[layer]
            size[layer] = 0.0
            tc[layer], tc[layer - 1] = 0.0, comm_s(size[layer - 1])
            tau_c = _comm_starts(tb, tc, tau_b)
        else:
            groups.append(group)
            group = []
    group.append(0)
    groups.append(group)
    return groups


def fixed_buckets(
    nbytes_in_production_order: Sequence[float],
    cap_bytes: float = DDP_BUCKET_BYTES,
    first_cap_bytes: float = DDP_FIRST_BUCKET_BYTES,
) -> list[list[int]]:
    """Buckets of gradients in production order, closed when they reach a cap.

    PyTorch DDP's rule (``torch.nn.parallel.DistributedDataParallel``,
    ``bucket_cap_mb`` = 25; the first bucket is capped at 1 MiB so the first
    all-reduce starts early): gradients join the open bucket in the order back
    propagation produces them; a bucket is closed once its bytes reach its cap.

    Args:
        nbytes_in_production_order: (G,) bytes of each gradient.
        cap_bytes, first_cap_bytes: caps, bytes (> 0).

    Returns:
        Buckets of gradient indices (into the argument), in production order.

    Raises:
        ValueError: a cap ≤ 0.
    """
    if not (cap_bytes > 0 and first_cap_bytes > 0):
        raise ValueError("bucket caps must be > 0 bytes")
    buckets: list[list[int]] = []
    open_: list[int] = []
    filled = 0.0
    for i, b in enumerate(nbytes_in_production_order):
        open_.append(i)
        filled += b
        if filled >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(open_)
            open_, filled = [], 0.0
    if open_:
        buckets.append(open_)
    return buckets
