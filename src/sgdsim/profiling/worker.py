"""Entry point of the profiled worker: ``python -m sgdsim.profiling.worker``.

Builds the training graph in ``tf.compat.v1`` graph mode with
``replica_device_setter`` (variables on the PS, compute on the worker), trains
on a synthetic batch, and writes into ``--out``:

- ``trace_{k}.pb``: the raw ``RunMetadata`` of traced step k (step stats with
  ``FULL_TRACE`` and the partition graphs, which name every send/recv pair),
- ``variables.json``: each variable's name, bytes, PS device (``var.device``, as
  ``replica_device_setter`` placed it on one of the PS tasks), gradient tensor
  and update op,
- ``meta.json``: TF version, host, device, batch, image size, parameter count,
  untraced and traced step wall times in seconds; for each traced step (and a
  traced probe that fetches one small tensor from the PS) the seconds of its
  ``Session.run`` call before its first op and after its last.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sgdsim.hostcpu import process_cpu_s
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.progress import progress, write_line
from sgdsim.traces.parse import step_window_us, transfer_records

#: Session calls that fetch one small tensor from the PS, timed after the steps.
RTT_PROBES = 30
#: Traced calls of the same probe: the session's own cost before and after a step's ops.
TRACED_PROBES = 10
#: Tries per traced step until its RunMetadata holds every transfer (see transfer_records).
TRACE_ATTEMPTS = 3


def log(msg: str) -> None:
    write_line(f"[profile] {msg}")


def step_plan(untraced: int, traced: int) -> list[bool]:
    """Order of untraced (False) and traced (True) steps: traced spread evenly.

    >>> "".join("T" if x else "u" for x in step_plan(8, 3))
    'uuTuuTuuTuu'
    """
    n = untraced + traced
    at = {(k + 1) * (n + 1) // (traced + 1) - 1 for k in range(traced)}
    return [i in at for i in range(n)]


def _dtype_bytes(v: Any) -> int:
    return int(v.dtype.base_dtype.size) * int(v.shape.num_elements())


def _stamped_run(sess: Any, fetch: Any, options: Any, md: Any) -> tuple[float, float, float]:
    """Run one traced ``sess.run`` and stamp it with the client's clock.

    ``time.time()`` is the clock of TensorFlow's ``all_start_micros``, so the
    trace's first and last op (``traces.parse.step_window_us``) place the call's
    ops inside it. Returns (wall seconds of the call, seconds before its first
    op, seconds after its last op); ``md`` (a ``RunMetadata``) is filled.
    """
    c0, t = time.time(), time.perf_counter()
    sess.run(fetch, options=options, run_metadata=md)
    dt, c1 = time.perf_counter() - t, time.time()
    first, last = step_window_us(md)
    return dt, first * 1e-6 - c0, c1 - last * 1e-6


def run_worker(
    spec: ProfileSpec, cluster: dict[str, list[str]], out: Path, ps_pids: Sequence[int] = ()
) -> None:
    """Profile ``spec`` as task 0 of job ``worker`` of ``cluster``; write into ``out``.

    ``ps_pids``: process ids of the PS tasks (on this host), whose CPU time per
    untraced step is recorded beside the worker's own (:func:`process_cpu_s`).

    Raises:
        RuntimeError: a GPU was asked for but none is visible on this node.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tf_keras

    from sgdsim.profiling.graph import build_training_graph

    tf.compat.v1.disable_eager_execution()
    if spec.device == "gpu" and not tf.config.list_physical_devices("GPU"):
        raise RuntimeError(
            f"hardware entry {spec.hardware!r} has device: gpu, but this node has no visible "
            "GPU (tf.config.list_physical_devices('GPU') is empty); run the profile job on "
            "a GPU node or set device: cpu"
        )
    cfg = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=spec.intra_op_threads,
        inter_op_parallelism_threads=spec.inter_op_threads,
        allow_soft_placement=False,
    )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster), job_name="worker", task_index=0, config=cfg
    )
    dev = "GPU:0" if spec.device == "gpu" else "CPU:0"
    worker_device = f"/job:worker/task:0/device:{dev}"
    tg = build_training_graph(spec, cluster, worker_device)
    graph, train_op, init, opt, grads_and_vars = (
        tg.graph,
        tg.train_op,
        tg.init,
        tg.opt,
        tg.grads_and_vars,
    )
    with graph.as_default():
        grad_of = {v.name: g for g, v in grads_and_vars}
        ops = graph.get_operations()
        variables = []
        for v in tf.compat.v1.global_variables():
            prefix = f"{opt.get_name()}/update_{v.op.name}/"
            update = [o.name for o in ops if o.name.startswith(prefix) and "Apply" in o.type]
            if not update:  # Adam names its update ops after the optimizer's own scope
                update = [
                    o.name
                    for o in ops
                    if "Apply" in o.type and o.inputs and o.inputs[0].op.name == v.op.name
                ]
            g = grad_of.get(v.name)
            variables.append(
                {
                    "variable": v.op.name,
                    "shape": [int(d) for d in v.shape],
                    "bytes": _dtype_bytes(v),
                    "device": v.device,
                    "trainable": v.name in grad_of,
                    "gradient": g.name if g is not None else None,
                    "update_op": update[0] if update else None,
                }
            )
        param_count = int(sum(int(v.shape.num_elements()) for _, v in grads_and_vars))
        # one tensor from the PS to this worker: a RecvTensor round trip (see rpc_rtt_s)
        with tf.compat.v1.device(worker_device):
            rtt_probe = tf.identity(
                tf.compat.v1.train.get_global_step().read_value(), name="rtt_probe"
            )
            local_probe = tf.identity(tf.constant(0, tf.int64), name="local_probe")
        graph.finalize()

    log(
        f"{spec.model} {spec.image_size}px batch {spec.batch_size} {spec.optimizer} "
        f"on {spec.device}: "
        f"{param_count:,} parameters in {len(variables)} variables"
    )
    placed: dict[str, int] = {}
    for v in variables:
        placed[v["device"]] = placed.get(v["device"], 0) + v["bytes"]
    log("variable bytes per device: " + ", ".join(f"{d} {n:,}" for d, n in sorted(placed.items())))
    with tf.compat.v1.Session(server.target, graph=graph, config=cfg) as sess:
        sess.run(init)
        plan = step_plan(spec.timed_steps, spec.traced_steps)
        bar = progress(
            desc=f"[profile] {spec.model} steps (warm-up, timed, traced)",
            total=spec.warmup_steps + len(plan),
            unit="step",
        )
        log(f"warm-up: {spec.warmup_steps} steps")
        for _ in range(spec.warmup_steps):
            sess.run(train_op)
            bar.update()
        opts = tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True
        )
        # Traced steps are spread evenly among the untraced ones, so that both
        # see the same machine state: the tracing factor (untraced / traced)
        # then measures tracing, not drift between two phases of the run.
        untraced: list[float] = []
        traced: list[float] = []
        # each traced call's time before its first op and after its last (client clock)
        dispatch: list[float] = []
        returned: list[float] = []
        # CPU seconds of the worker process and of all PS processes in each untraced step
        worker_cpu: list[float] = []
        ps_cpu: list[float] = []
        for traced_step in plan:
            if traced_step:
                k = len(traced)
                for attempt in range(1, TRACE_ATTEMPTS + 1):
                    md = tf.compat.v1.RunMetadata()
                    dt, before, after = _stamped_run(sess, train_op, opts, md)
                    recorded, expected = transfer_records(md)
                    if recorded == expected:
                        break
                    log(
                        f"traced step {k + 1}: {recorded} of {expected} RecvTensor records "
                        f"came back (attempt {attempt}/{TRACE_ATTEMPTS}); tracing it again"
                    )
                else:
                    raise SystemExit(
                        f"[profile] traced step {k + 1}: TensorFlow returned incomplete step "
                        f"stats {TRACE_ATTEMPTS} times ({recorded} of {expected} transfers "
                        "recorded); re-run the profile stage"
                    )
                traced.append(dt)
                dispatch.append(before)
                returned.append(after)
                (out / f"trace_{k}.pb").write_bytes(md.SerializeToString())
                log(f"traced step {k + 1}/{spec.traced_steps}: {traced[-1]:.4f} s")
            else:
                me0, ps0 = process_cpu_s(os.getpid()), [process_cpu_s(p) for p in ps_pids]
                t = time.perf_counter()
                sess.run(train_op)
                untraced.append(time.perf_counter() - t)
                me1, ps1 = process_cpu_s(os.getpid()), [process_cpu_s(p) for p in ps_pids]
                if me0 is not None and me1 is not None:
                    worker_cpu.append(me1 - me0)
                if ps_pids and None not in ps0 + ps1:
                    ps_cpu.append(sum(b - a for a, b in zip(ps0, ps1, strict=True)))  # type: ignore[operator,misc]
                log(
                    f"untraced step {len(untraced)}/{spec.timed_steps}: {untraced[-1]:.4f} s"
                    + (f", worker CPU {worker_cpu[-1]:.4f} s" if worker_cpu else "")
                    + (f", PS CPU {ps_cpu[-1]:.4f} s" if ps_cpu else "")
                )
            bar.update()
        bar.close()

        # Round trip of one small tensor PS -> worker: what each link of an
        # enforced pull order costs (see enforce_pull_order). The same call for a
        # worker-local tensor measures the session's own cost, which is subtracted.
        rtt: list[float] = []
        local: list[float] = []
        for _ in range(RTT_PROBES):
            for probe, times in ((rtt_probe, rtt), (local_probe, local)):
                t = time.perf_counter()
                sess.run(probe)
                times.append(time.perf_counter() - t)
        rpc_rtt = max(0.0, statistics.median(rtt) - statistics.median(local))
        log(f"RPC round trip (small tensor from the PS): {rpc_rtt * 1e3:.3f} ms")
        # The same probe traced: its few ops leave a trace too small to cost
        # collection time, so what follows its last op is the session's return.
        probe_opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        probe_dispatch: list[float] = []
        probe_return: list[float] = []
        for _ in range(TRACED_PROBES):
            _, before, after = _stamped_run(sess, rtt_probe, probe_opts, tf.compat.v1.RunMetadata())
            probe_dispatch.append(before)
            probe_return.append(after)
        log(
            f"traced step: {statistics.median(dispatch) * 1e3:.1f} ms before its first op, "
            f"{statistics.median(returned) * 1e3:.1f} ms after its last; traced probe: "
            f"{statistics.median(probe_dispatch) * 1e3:.2f} / "
            f"{statistics.median(probe_return) * 1e3:.2f} ms"
        )

    med_u, med_t = statistics.median(untraced), statistics.median(traced)
    q = statistics.quantiles(untraced, n=4) if len(untraced) > 1 else [med_u, med_u, med_u]
    log(
        f"untraced median {med_u:.4f} s (IQR {q[2] - q[0]:.4f} s), traced median "
        f"{med_t:.4f} s: tracing overhead x{med_t / med_u:.2f}"
    )
    (out / "variables.json").write_text(json.dumps(variables, indent=1))
    meta = {
        "spec": json.loads(spec.to_json()),
        "tf_version": tf.__version__,
        "tf_keras_version": tf_keras.__version__,
        "host": platform.node(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "worker_device": worker_device,
        "param_count": param_count,
        "param_bytes": int(sum(v["bytes"] for v in variables if v["trainable"])),
        "untraced_step_s": untraced,
        "traced_step_s": traced,
        "rpc_rtt_s": rpc_rtt,
        "session_call_s": statistics.median(local),
        "traced_dispatch_s": dispatch,
        "traced_return_s": returned,
        "probe_dispatch_s": probe_dispatch,
        "probe_return_s": probe_return,
        "worker_cpu_s": worker_cpu,
        "ps_cpu_s": ps_cpu,
        "node_cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--spec", required=True, help="ProfileSpec as JSON")
    p.add_argument("--cluster", required=True, help="cluster spec as JSON")
    p.add_argument("--out", required=True, type=Path, help="existing output directory")
    p.add_argument("--ps-pids", default="", help="PS process ids (comma-separated), for CPU time")
    a = p.parse_args(argv)
    try:
        ps_pids = [int(x) for x in a.ps_pids.split(",") if x]
        run_worker(ProfileSpec.from_json(a.spec), json.loads(a.cluster), a.out, ps_pids)
    except Exception as e:  # reported by the parent with the log
        log(f"error: {type(e).__name__}: {e}")
        return 1
    sys.stdout.flush()
    os._exit(0)  # the in-process gRPC server cannot be stopped cleanly; leave at once


if __name__ == "__main__":
    sys.exit(main())
