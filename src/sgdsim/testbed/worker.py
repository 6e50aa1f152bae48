"""Entry point of one asynchronous training worker: ``python -m sgdsim.testbed.worker``.

Between-graph replication: every worker runs its own ``tf.distribute.Server``
and session and builds the same graph with ``replica_device_setter`` (variables
on the PS, compute on this worker), like :mod:`sgdsim.profiling.worker`. Updates
are asynchronous: each worker applies its gradients to the PS variables as soon
as its step is done. Task 0 is the chief and initializes the variables; the
others wait (bounded) until ``report_uninitialized_variables()`` is empty.

The worker runs ``--warmup-steps`` steps, then trains until ``--duration``
seconds have passed since the last of them ended and at least ``--min-steps``
more steps ended, and writes ``--out`` atomically as JSON::

    {"task": k, "host": ..., "start_time": epoch s, "init_wait_s": s,
     "step_end_times": [epoch s of the end of every step (time.time())],
     "episodes": [[epoch s of the step ends of each episode], ...]}

With ``--ready`` and ``--go`` the workers run ``--episodes`` episodes, each
started together from chosen offsets: before episode ``e`` a worker writes
the file ``{ready}.{e}`` and waits, idle, until the parent writes
``{go}.{e}`` (``{"start": epoch s, "offsets_s": [one per task]}``); it then
sleeps until ``start + offsets_s[task]`` and trains ``--duration`` seconds
and at least ``--min-steps`` steps from there. Without them there is one
episode, which starts right after the warm-up steps.

With ``--progress`` the worker also appends every step end (epoch s, one per
line, flushed) to that file as it goes, and with ``--stop`` it ends its
episode after the step during which that file appeared: the steady-state
protocol, where the parent decides from the step ends so far when the
estimate has converged (:func:`sgdsim.protocol.steady_stop`). A stop file
that holds an integer S ends the run after its S-th step (warm-up steps
included) instead: synchronous workers step in lockstep, and one that left
early would leave the others waiting for its gradients.

With ``--sync-replicas N`` the workers train synchronously through the PS
(``sync_ps``): ``SyncReplicasOptimizer`` aggregates N gradients per update
(:func:`sgdsim.profiling.graph.build_training_graph`). The chief initializes
the variables and its local step, starts the optimizer's queue runner (which
applies each update and hands out one token per worker) and adds no initial
tokens, so that every step waits for the update of the previous one: one
step of each worker = one synchronous update. The other workers wait for the
variables, then set their local step from the global step.

With ``--skeleton WORKLOAD`` the worker runs the skeleton of that workload's
profiled step instead of the model (:mod:`sgdsim.testbed.skeleton`: the
profile's transfers, its compute as waits), asynchronously.

It then leaves with ``os._exit(0)`` (an in-process gRPC server cannot be stopped
cleanly); exit code 1 on any error, 3 when ``--lifetime`` seconds ran out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sgdsim.io import atomic_path
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.protocol import episode_done

#: Seconds a non-chief worker waits for the chief to initialize the variables.
INIT_WAIT_S = 120.0


#: Times a step TensorFlow aborted is run again before the worker gives up.
ABORT_RETRIES = 3


def log(msg: str) -> None:
    print(f"[worker] {msg}", file=sys.stderr, flush=True)


def run_step(sess: Any, op: Any, aborted: type[Exception], task: int) -> None:
    """Run one training step; run it again (at most :data:`ABORT_RETRIES` times) if
    TensorFlow aborts it.

    When gRPC retries a call, TensorFlow's master can send the same RunGraph
    request twice and the task refuses the step ("The same RunGraph (Worker)
    request was received twice", seen once on loopback); Aborted is the status
    TensorFlow documents as retriable (``tf.errors.AbortedError``).

    Raises:
        aborted: the step was aborted more than :data:`ABORT_RETRIES` times.
    """
    for attempt in range(ABORT_RETRIES + 1):
        try:
            sess.run(op)
            return
        except aborted as e:
            if attempt == ABORT_RETRIES:
                raise
            log(f"task {task}: step aborted ({str(e).splitlines()[0][:120]}); running it again")


def run_worker(
    spec: ProfileSpec,
    cluster: dict[str, list[str]],
    task: int,
    duration_s: float,
    out: Path,
    init_wait_s: float = INIT_WAIT_S,
    warmup_steps: int = 0,
    min_steps: int = 0,
    ready: Path | None = None,
    go: Path | None = None,
    go_wait_s: float = INIT_WAIT_S,
    episodes: int = 1,
    progress: Path | None = None,
    stop: Path | None = None,
    sync_replicas: int = 0,
    skeleton: Path | None = None,
) -> int:
    """Train ``spec`` asynchronously as ``/job:worker/task:{task}``.

    Runs ``warmup_steps`` steps, then trains until ``duration_s`` seconds have
    passed since the last warm-up step ended and at least ``min_steps`` more
    steps ended (TensorFlow's first steps in a process are slower: allocator
    growth, first-run kernels, TCP windows).

    With ``ready`` and ``go`` (both or neither): before each of ``episodes``
    episodes ``e``, write ``{ready}.{e}`` and wait until ``{go}.{e}`` exists
    (``{"start": epoch s, "offsets_s": [...]}``), then start the episode's
    steps at ``start + offsets_s[task]``; each episode lasts ``duration_s``
    and at least ``min_steps`` steps.

    ``progress``: file to which every step end (epoch s) is appended as a line
    as soon as the step ends. ``stop``: the episode also ends after the step
    during which this file appeared (or, if it holds an integer S, after the
    worker's S-th step, warm-up included).

    ``sync_replicas``: N > 0 trains synchronously (``SyncReplicasOptimizer``
    over N replicas, see the module docstring); 0: asynchronously.

    ``skeleton``: a workload JSON (:class:`~sgdsim.simulation.Workload`): run
    the skeleton of its profiled step (:mod:`sgdsim.testbed.skeleton`) in
    place of ``spec``'s training, asynchronously; ``spec`` gives the threads.

    Writes the step end times (epoch seconds) to ``out`` as JSON, atomically.

    Returns:
        The number of steps run.

    Raises:
        TimeoutError: a non-chief waited more than ``init_wait_s`` seconds for the
            chief to initialize the variables, or ``go`` did not appear within
            ``go_wait_s`` seconds of ``ready``.
        ValueError: unknown model or optimizer (from :mod:`sgdsim.models`).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from sgdsim.profiling.graph import build_training_graph

    tf.compat.v1.disable_eager_execution()
    cfg = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=spec.intra_op_threads,
        inter_op_parallelism_threads=spec.inter_op_threads,
        allow_soft_placement=False,
        # between-graph replication: talk to the PS and ourselves, never wait for peers
        device_filters=["/job:ps", f"/job:worker/task:{task}"],
    )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster), job_name="worker", task_index=task, config=cfg
    )
    worker_device = f"/job:worker/task:{task}/device:CPU:0"
    if skeleton is not None:
        from sgdsim.simulation import Workload
        from sgdsim.testbed.skeleton import build_skeleton_graph

        if sync_replicas:
            raise ValueError("a skeleton step runs asynchronously (no --sync-replicas)")
        tg = build_skeleton_graph(Workload.load(str(skeleton)), cluster, worker_device)
    else:
        tg = build_training_graph(spec, cluster, worker_device, sync_replicas)
    graph, train_op, init = tg.graph, tg.train_op, tg.init
    with graph.as_default():
        if sync_replicas:
            # the local step lives on this worker: wait for the PS's variables only
            uninitialized = tg.opt.ready_for_local_init_op
            local_init = tg.opt.chief_init_op if task == 0 else tg.opt.local_step_init_op
            no_tokens = tg.opt.get_init_tokens_op(num_tokens=0) if task == 0 else None
        else:
            uninitialized = tf.compat.v1.report_uninitialized_variables()
        graph.finalize()

    # a skeleton has no images: its step is the profile's transfers and waits
    what = (
        f"the skeleton of {skeleton}"
        if skeleton is not None
        else f"{spec.model} {spec.image_size}px batch {spec.batch_size}"
    )
    log(f"task {task}: {what} at {server.target}")
    with tf.compat.v1.Session(server.target, graph=graph, config=cfg) as sess:
        t_wait = time.monotonic()
        if task == 0:
            sess.run(init)
        else:
            while len(sess.run(uninitialized)) > 0:
                if time.monotonic() - t_wait > init_wait_s:
                    raise TimeoutError(
                        f"worker {task}: the chief did not initialize the variables within "
                        f"{init_wait_s:g} s"
                    )
                time.sleep(0.1)
        if sync_replicas:
            sess.run(local_init)
            if task == 0:
                # a coordinator takes the runner's error when the session closes under it
                coord = tf.train.Coordinator()
                runner = tg.opt.get_chief_queue_runner()
                runner.create_threads(sess, coord=coord, daemon=True, start=True)
                sess.run(no_tokens)
        init_wait = time.monotonic() - t_wait
        log(
            f"task {task}: variables ready after {init_wait:.2f} s; {warmup_steps} warm-up "
            f"step(s), then {duration_s:g} s and at least {min_steps} step(s)"
        )
        ends: list[float] = []
        start = time.time()
        feed = open(progress, "a", buffering=1) if progress is not None else None  # noqa: SIM115

        def record(t: float) -> None:
            if feed is not None:
                feed.write(f"{t!r}\n")

        for _ in range(warmup_steps):
            run_step(sess, train_op, tf.errors.AbortedError, task)
            ends.append(time.time())
            record(ends[-1])
        episode_ends: list[list[float]] = []
        for e in range(episodes if ready is not None and go is not None else 1):
            if ready is not None and go is not None:
                t0 = _wait_for_go(Path(f"{ready}.{e}"), Path(f"{go}.{e}"), task, go_wait_s)
            else:
                t0 = ends[-1] if ends else start
            mine: list[float] = []
            while True:
                run_step(sess, train_op, tf.errors.AbortedError, task)
                mine.append(time.time())
                record(mine[-1])
                if episode_done(mine, t0, duration_s, min_steps) or stop_reached(
                    stop, len(ends) + len(mine)
                ):
                    break
            episode_ends.append(mine)
            ends.extend(mine)
        now = ends[-1]
        if feed is not None:
            feed.close()
    result = {
        "task": task,
        "host": platform.node(),
        "start_time": start,
        "init_wait_s": init_wait,
        "step_end_times": ends,
        "episodes": episode_ends,
    }
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(result))
    log(f"task {task}: {len(ends)} steps in {now - start:.2f} s")
    return len(ends)


def stop_reached(stop: Path | None, steps_done: int) -> bool:
    """Whether a worker that ran ``steps_done`` steps stops now: the ``stop`` file
    exists and holds no integer, or holds an integer S ≤ ``steps_done``."""
    if stop is None or not stop.exists():
        return False
    text = stop.read_text().strip()
    return not text.isdigit() or steps_done >= int(text)


def _wait_for_go(ready: Path, go: Path, task: int, wait_s: float) -> float:
    """Write ``ready``, wait for ``go``, sleep until this task's start; return it (epoch s).

    Raises:
        TimeoutError: ``go`` did not appear within ``wait_s`` seconds.
    """
    with atomic_path(ready) as tmp:
        tmp.write_text("ready\n")
    t0 = time.monotonic()
    while not go.exists():
        if time.monotonic() - t0 > wait_s:
            raise TimeoutError(f"worker {task}: no start signal within {wait_s:g} s of warm-up")
        time.sleep(0.01)
    plan = json.loads(go.read_text())
    at = float(plan["start"]) + float(plan["offsets_s"][task])
    time.sleep(max(0.0, at - time.time()))
    return at


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--spec", required=True, help="ProfileSpec as JSON")
    p.add_argument("--cluster", required=True, help="cluster spec as JSON")
    p.add_argument("--task", required=True, type=int, help="worker task index (0 = chief)")
    p.add_argument("--duration", required=True, type=float, help="seconds of training")
    p.add_argument("--out", required=True, type=Path, help="JSON file to write")
    p.add_argument("--warmup-steps", type=int, default=0, help="steps before the duration counts")
    p.add_argument("--min-steps", type=int, default=0, help="steps after warm-up, at least")
    p.add_argument(
        "--lifetime", type=float, default=None, help="hard limit in seconds (duration + 600)"
    )
    p.add_argument("--ready", type=Path, default=None, help="file written after warm-up")
    p.add_argument("--go", type=Path, default=None, help="start file to wait for after warm-up")
    p.add_argument("--episodes", type=int, default=1, help="episodes (with --ready and --go)")
    p.add_argument("--progress", type=Path, default=None, help="file to append step ends to")
    p.add_argument("--stop", type=Path, default=None, help="stop after it appears")
    p.add_argument(
        "--sync-replicas", type=int, default=0, help="N: synchronous over N workers (0: async)"
    )
    p.add_argument(
        "--skeleton", type=Path, default=None, help="workload JSON: run its step's skeleton"
    )
    a = p.parse_args(argv)
    lifetime = a.lifetime if a.lifetime is not None else a.duration + 600.0
    timer = threading.Timer(lifetime, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    try:
        run_worker(
            ProfileSpec.from_json(a.spec),
            json.loads(a.cluster),
            a.task,
            a.duration,
            a.out,
            warmup_steps=a.warmup_steps,
            min_steps=a.min_steps,
            ready=a.ready,
            go=a.go,
            episodes=a.episodes,
            progress=a.progress,
            stop=a.stop,
            sync_replicas=a.sync_replicas,
            skeleton=a.skeleton,
        )
    except Exception as e:  # reported by the parent with the log
        log(f"task {a.task}: error: {type(e).__name__}: {e}")
        sys.stderr.flush()
        os._exit(1)  # the gRPC server may hold non-daemon threads
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the in-process gRPC server cannot be stopped cleanly; leave at once


if __name__ == "__main__":
    sys.exit(main())
