"""The simulator's input: one worker's calibrated step, in seconds and bytes.

A step is a sequence of compute *segments* run one after another on the
worker. Segment ``s`` may start only when every pull gated on it has arrived;
at the end of segment ``s`` the gradients it produced are pushed (wait-free
back-propagation, WFBP). Each push, once at the PS, costs the PS CPU its update
time. Built from a normalized profile by :func:`sgdsim.traces.build_workload`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from sgdsim.errors import WorkloadError


@dataclass(frozen=True)
class Network:
    """A network where every host has a full-duplex NIC.

    Attributes:
        bandwidth_Bps: capacity per direction of each NIC in bytes/s.
        latency_s: fixed per-message latency in seconds (paid once per transfer).
        name: label used in results.
        burst_bytes: depth of a token bucket in front of each PS NIC direction,
            payload bytes: a direction idle for ``t`` seconds gathers
            ``min(burst_bytes, t · bandwidth_Bps)`` bytes of tokens, and that
            many bytes then leave at once (Linux ``tbf``, the testbed's shaper:
            tc-tbf(8)). 0: a plain NIC, which never sends above its rate.
        two_way_share: (pull direction, push direction): the share of
            ``bandwidth_Bps`` a PS NIC direction carries while the other
            direction carries data too, each in (0, 1]. Each direction's ACKs
            travel in the other's queue; behind a FIFO full of data they come
            late, and TCP's windows, clocked by them, leave the link partly
            idle (two-way traffic: Zhang, Shenker, Clark, SIGCOMM 1991).
            Measured on the testbed in a capture of the model's training
            at the same N (:func:`sgdsim.testbed.calibrate.training_join_delays`); (1, 1):
            no loss.

    Raises:
        ValueError: bandwidth ≤ 0, latency < 0, burst_bytes < 0 or a
            two_way_share outside (0, 1].
    """

    bandwidth_Bps: float
    latency_s: float = 0.0
    name: str = "net"
    burst_bytes: float = 0.0
    two_way_share: tuple[float, float] = (1.0, 1.0)

    def __post_init__(self) -> None:
        if not self.bandwidth_Bps > 0:
            raise ValueError(
                f"network {self.name}: bandwidth must be > 0, got {self.bandwidth_Bps}"
            )
        if self.latency_s < 0:
            raise ValueError(f"network {self.name}: latency must be >= 0, got {self.latency_s}")
        if not self.burst_bytes >= 0:
            raise ValueError(f"network {self.name}: burst must be >= 0, got {self.burst_bytes}")
        share = tuple(float(x) for x in self.two_way_share)
        if len(share) != 2 or not all(0.0 < x <= 1.0 for x in share):
            raise ValueError(
                f"network {self.name}: two_way_share needs two shares in (0, 1], "
                f"got {self.two_way_share}"
            )
        object.__setattr__(self, "two_way_share", share)

    @classmethod
    def from_bits(cls, bandwidth_bps: float, latency_s: float = 0.0, name: str = "net") -> Network:
        """Network from a capacity in bit/s (as configs and NIC data sheets give it)."""
        return cls(bandwidth_bps / 8.0, latency_s, name)


@dataclass(frozen=True)
class Workload:
    """One worker's step, calibrated to untraced time.

    Shapes: S segments, P pulls, Q pushes.

    Attributes:
        seg_dur_s: (S,) compute time of each segment in seconds.
        pull_bytes: (P,) size of each pull (PS → worker) in bytes, in the order
            the pulls are issued (for ``tf_default``: the order they arrived in
            the trace).
        pull_gate: (P,) index of the first segment that needs the pull, in
            ``[0, S]``; ``S`` means only the end of the step waits for it.
        push_bytes: (Q,) size of each push (worker → PS) in bytes.
        push_seg: (Q,) segment at whose end the push is issued, in ``[-1, S-1]``;
            ``-1`` means at step start.
        push_update_s: (Q,) PS CPU time to apply the push, in seconds.
        pull_start_s: delay from step start to issuing the pulls, in seconds.
        overhead_s: per-step overhead between two steps (client, RPC), seconds.
        batch_size: samples per step.
        meta: free-form provenance (profile id, calibration figures).
        pull_shard: (P,) PS task (shard) that serves each pull, in ``[0, ps_tasks)``;
            None = all on shard 0.
        push_shard: (Q,) PS task (shard) that receives each push; None = all on shard 0.
        ps_tasks: number of PS tasks (shards), each on its own host with its own NIC.
        worker_cpu_s: CPU seconds (all threads) the worker process used per step
            in the profile; None = not measured.
        ps_cpu_s: CPU seconds all PS processes used per step in the profile
            (serving the pulls and pushes, applying the updates); None = not measured.
        node_cores: cores of the profiled node; None = not measured.
        rpc_rtt_s: round trip of one small tensor from the PS to the worker, in
            seconds: what each link of an enforced pull order costs.
        push_param: (Q,) index of the pull carrying the variable each push
            updates, in ``[-1, P)``, ``-1`` = none (each pull at most once);
            None = unknown, all ``-1``. Used by ``p3`` to send a parameter back
            right after its update.
        step_scale: (K,) each profiled untraced step's time over the mean of
            its profile run (dimensionless, mean 1 per run;
            :func:`sgdsim.traces.calibrate.step_time_ratios`): how much one
            step's compute varies from the next; with ``step_jitter`` the
            simulator stretches each simulated step's compute by one of them,
            drawn at random. None = not measured (every step the same).
        pull_orders: (K·P,) K pull orders one after another, each a permutation
            of the P pulls: the order in which one traced step's pulls arrived
            (:func:`sgdsim.traces.calibrate.step_pull_orders`). Real workers
            deliver their pulls in a new order every step (docs/steady-state-log.md,
            "One tensor at a time, in a new order every step"), so ``tf_default``
            draws one of them for each simulated step. None = not measured (the
            workload's order every step).
    """

    seg_dur_s: npt.NDArray[np.float64]
    pull_bytes: npt.NDArray[np.float64]
    pull_gate: npt.NDArray[np.int64]
    push_bytes: npt.NDArray[np.float64]
    push_seg: npt.NDArray[np.int64]
    push_update_s: npt.NDArray[np.float64]
    pull_start_s: float = 0.0
    overhead_s: float = 0.0
    batch_size: int = 1
    meta: dict[str, Any] = field(default_factory=dict)
    pull_shard: npt.NDArray[np.int64] | None = None
    push_shard: npt.NDArray[np.int64] | None = None
    ps_tasks: int = 1
    worker_cpu_s: float | None = None
    ps_cpu_s: float | None = None
    node_cores: int | None = None
    rpc_rtt_s: float = 0.0
    push_param: npt.NDArray[np.int64] | None = None
    step_scale: npt.NDArray[np.float64] | None = None
    pull_orders: npt.NDArray[np.int64] | None = None

    def __post_init__(self) -> None:
        if self.push_param is None:
            object.__setattr__(self, "push_param", np.full(len(self.push_bytes), -1, np.int64))
        if self.pull_shard is None:
            object.__setattr__(self, "pull_shard", np.zeros(len(self.pull_bytes), np.int64))
        if self.push_shard is None:
            object.__setattr__(self, "push_shard", np.zeros(len(self.push_bytes), np.int64))
        pull_shard, push_shard = self.pulls_shard, self.pushes_shard
        s = len(self.seg_dur_s)
        checks = [
            (s >= 1, "at least one compute segment"),
            (
                len(self.pull_bytes) == len(self.pull_gate),
                "pull_bytes and pull_gate of equal length",
            ),
            (
                len(self.push_bytes) == len(self.push_seg) == len(self.push_update_s),
                "push arrays of equal length",
            ),
            (bool(np.all(self.seg_dur_s >= 0)), "non-negative segment durations"),
            (
                bool(np.all(self.pull_bytes >= 0)) and bool(np.all(self.push_bytes >= 0)),
                "non-negative sizes",
            ),
            (bool(np.all((self.pull_gate >= 0) & (self.pull_gate <= s))), "pull_gate in [0, S]"),
            (bool(np.all((self.push_seg >= -1) & (self.push_seg < s))), "push_seg in [-1, S-1]"),
            (bool(np.all(self.push_update_s >= 0)), "non-negative update times"),
            (self.pull_start_s >= 0 and self.overhead_s >= 0, "non-negative offsets"),
            (self.batch_size >= 1, "batch_size >= 1"),
            (self.ps_tasks >= 1, "ps_tasks >= 1"),
            (
                len(pull_shard) == len(self.pull_bytes) and len(push_shard) == len(self.push_bytes),
                "pull_shard and push_shard as long as pull_bytes and push_bytes",
            ),
            (
                bool(np.all((pull_shard >= 0) & (pull_shard < self.ps_tasks)))
                and bool(np.all((push_shard >= 0) & (push_shard < self.ps_tasks))),
                "shards in [0, ps_tasks)",
            ),
            (
                len(self.pushes_param) == len(self.push_bytes)
                and bool(
                    np.all((self.pushes_param >= -1) & (self.pushes_param < len(self.pull_bytes)))
                )
                and len(set(self.pushes_param[self.pushes_param >= 0].tolist()))
                == int(np.sum(self.pushes_param >= 0)),
                "push_param as long as push_bytes, in [-1, P), each pull at most once",
            ),
            (
                self.step_scale is None
                or (len(self.step_scale) > 0 and bool(np.all(self.step_scale > 0))),
                "step_scale None or positive ratios",
            ),
            (
                _orders_ok(self.pull_orders, len(self.pull_bytes)),
                "pull_orders None or permutations of the P pulls",
            ),
        ]
        bad = [what for ok, what in checks if not ok]
        if bad:
            raise ValueError(f"invalid workload: needs {', '.join(bad)}")

    @property
    def pulls_shard(self) -> npt.NDArray[np.int64]:
        """(P,) shard of each pull (``pull_shard`` with the None default resolved)."""
        assert self.pull_shard is not None  # set in __post_init__
        return self.pull_shard

    @property
    def pushes_shard(self) -> npt.NDArray[np.int64]:
        """(Q,) shard of each push (``push_shard`` with the None default resolved)."""
        assert self.push_shard is not None  # set in __post_init__
        return self.push_shard

    @property
    def pushes_param(self) -> npt.NDArray[np.int64]:
        """(Q,) pull of each push's variable (``push_param`` with the None default resolved)."""
        assert self.push_param is not None  # set in __post_init__
        return self.push_param

    @property
    def pull_order_rows(self) -> npt.NDArray[np.int64] | None:
        """(K, P) the profiled pull orders, one per row; None without them (or without pulls)."""
        if self.pull_orders is None or len(self.pull_bytes) == 0 or len(self.pull_orders) == 0:
            return None
        return self.pull_orders.reshape(-1, len(self.pull_bytes))

    @property
    def compute_s(self) -> float:
        """Total compute time of one step in seconds."""
        return float(self.seg_dur_s.sum())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, np.ndarray):
                d[k] = v.tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Workload:
        """Workload from the dict :meth:`to_dict` writes (a parsed workload JSON).

        Raises:
            WorkloadError: ``d`` is not a dict, a field is missing, not a flat
                list of finite numbers (integers for index fields), of another
                type, or out of range (names the field).
        """
        if not isinstance(d, dict):
            raise WorkloadError(f"a workload is a JSON object, got {type(d).__name__}")

        def array(key: str, dtype: type, optional: bool = False) -> Any:
            return _field_array(d, key, dtype, optional)

        def number(key: str, default: float | None, kind: type = float) -> Any:
            return _field_number(d, key, default, kind)

        meta = d.get("meta", {})
        if not isinstance(meta, dict):
            raise WorkloadError(f"field 'meta' must be an object, got {type(meta).__name__}")
        try:
            return cls(
                seg_dur_s=array("seg_dur_s", np.float64),
                pull_bytes=array("pull_bytes", np.float64),
                pull_gate=array("pull_gate", np.int64),
                push_bytes=array("push_bytes", np.float64),
                push_seg=array("push_seg", np.int64),
                push_update_s=array("push_update_s", np.float64),
                pull_start_s=number("pull_start_s", 0.0),
                overhead_s=number("overhead_s", 0.0),
                batch_size=number("batch_size", 1, int),
                meta=dict(meta),
                pull_shard=array("pull_shard", np.int64, optional=True),
                push_shard=array("push_shard", np.int64, optional=True),
                ps_tasks=number("ps_tasks", 1, int),
                worker_cpu_s=number("worker_cpu_s", None),
                ps_cpu_s=number("ps_cpu_s", None),
                node_cores=number("node_cores", None, int),
                rpc_rtt_s=number("rpc_rtt_s", 0.0),
                push_param=array("push_param", np.int64, optional=True),
                step_scale=array("step_scale", np.float64, optional=True),
                pull_orders=array("pull_orders", np.int64, optional=True),
            )
        except ValueError as e:
            raise WorkloadError(str(e)) from e

    def save(self, path: str) -> None:
        from sgdsim.io import atomic_path

        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str) -> Workload:
        """Read a workload JSON file.

        Raises:
            WorkloadError: the file is missing or not a workload (names the file
                and the field).
        """
        try:
            with open(path, encoding="utf-8") as fh:
                return cls.from_dict(json.load(fh))
        except (OSError, ValueError, RecursionError, WorkloadError) as e:
            raise WorkloadError(
                f"{path}: not a readable sgdsim workload ({e}); re-run the normalize stage "
                "(snakemake results/workloads/HARDWARE/MODEL.json) or pass the right file"
            ) from e


def _orders_ok(orders: npt.NDArray[np.int64] | None, n_pull: int) -> bool:
    """Whether ``orders`` is None or K whole permutations of ``range(n_pull)``."""
    if orders is None or len(orders) == 0:
        return True
    if n_pull == 0 or len(orders) % n_pull:
        return False
    rows = np.sort(orders.reshape(-1, n_pull), axis=1)
    return bool(np.all(rows == np.arange(n_pull)))


def _field_array(d: dict[str, Any], key: str, dtype: type, optional: bool = False) -> Any:
    """Field ``key`` of a workload dict as a numpy array of ``dtype`` (checked)."""
    if key not in d and not optional:
        raise WorkloadError(f"field {key!r} is missing")
    v = d.get(key)
    if v is None and optional:
        return None
    want = int if dtype is np.int64 else (int, float)
    if not isinstance(v, list) or not all(
        isinstance(x, want) and not isinstance(x, bool) for x in v
    ):
        kind = "integers" if dtype is np.int64 else "numbers"
        raise WorkloadError(f"field {key!r} must be a list of {kind}")
    try:
        a: Any = np.asarray(v, dtype=dtype)
    except OverflowError as e:
        raise WorkloadError(f"field {key!r}: a number is out of range ({e})") from e
    if dtype is np.float64 and not bool(np.all(np.isfinite(a))):
        raise WorkloadError(f"field {key!r} holds a number that is not finite")
    return a


def _field_number(d: dict[str, Any], key: str, default: float | None, kind: type = float) -> Any:
    """Field ``key`` of a workload dict as a finite ``kind`` (checked)."""
    v = d.get(key, default)
    if v is None and default is None:
        return None
    want = int if kind is int else (int, float)
    if not isinstance(v, want) or isinstance(v, bool) or not math.isfinite(v):
        raise WorkloadError(f"field {key!r} must be a finite {kind.__name__}, got {v!r}")
    if kind is int and not -(2**62) < v < 2**62:
        raise WorkloadError(f"field {key!r} is out of range: {v}")
    return kind(v)
