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
estimate has converged (:func:`sgdsim.protocol.steady_stop`).

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

from sgdsim.io import atomic_path
from sgdsim.profiling.spec import ProfileSpec
from sgdsim.protocol import episode_done

#: Seconds a non-chief worker waits for the chief to initialize the variables.
INIT_WAIT_S = 120.0


def log(msg: str) -> None:
    print(f"[worker] {msg}", file=sys.stderr, flush=True)


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
    during which this file appeared.

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
    tg = build_training_graph(spec, cluster, worker_device)
    graph, train_op, init = tg.graph, tg.train_op, tg.init
    with graph.as_default():
        uninitialized = tf.compat.v1.report_uninitialized_variables()
        graph.finalize()

    log(f"task {task}: {spec.model} {spec.image_size}px batch {spec.batch_size} at {server.target}")
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
            sess.run(train_op)
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
                sess.run(train_op)
                mine.append(time.time())
                record(mine[-1])
                if episode_done(mine, t0, duration_s, min_steps) or (
                    stop is not None and stop.exists()
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
