"""One worker of the pull race that :func:`sgdsim.testbed.calibrate.pull_join_delay` runs.

Each worker of a two-worker cluster pulls the same variables from the PS (the
reads of ``--tensors`` float32 variables of ``--floats`` elements each, summed
on the worker) in ``--reps`` timed steps. After three untimed warm-up steps it
writes ``--ready`` and waits for ``--go`` (``{"start": epoch s}``); step ``r``
of task ``k`` then starts at ``start + r × gap + k × offset``. Task 0 creates
and initializes the variables; the other waits until they exist.

Writes ``--out``: ``{"steps": [[planned start, start, end], ...]}`` (epoch s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from sgdsim.io import atomic_path
from sgdsim.progress import progress


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cluster", required=True, help="cluster spec as JSON")
    p.add_argument("--task", type=int, required=True)
    p.add_argument("--floats", type=int, required=True, help="elements per variable")
    p.add_argument("--tensors", type=int, default=4)
    p.add_argument("--reps", type=int, default=12)
    p.add_argument("--gap", type=float, required=True, help="seconds between steps")
    p.add_argument("--offset", type=float, default=0.0, help="task k starts k × offset later")
    p.add_argument("--ready", type=Path, required=True)
    p.add_argument("--go", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2, help="intra- and inter-op threads")
    p.add_argument("--lifetime", type=float, default=300.0, help="hard limit, seconds")
    a = p.parse_args(argv)
    timer = threading.Timer(a.lifetime, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    server = tf.distribute.Server(
        tf.train.ClusterSpec(json.loads(a.cluster)), job_name="worker", task_index=a.task
    )
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            vs = [
                tf.compat.v1.get_variable(
                    f"race_{i}",
                    [a.floats],
                    initializer=tf.compat.v1.zeros_initializer(),
                    use_resource=True,
                )
                for i in range(a.tensors)
            ]
        with tf.device(f"/job:worker/task:{a.task}"):
            pull = tf.add_n([tf.reduce_sum(tf.identity(v.read_value())) for v in vs])
        init = tf.compat.v1.variables_initializer(vs)
        missing = tf.compat.v1.report_uninitialized_variables(vs)
    cfg = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=a.threads, inter_op_parallelism_threads=a.threads
    )
    with tf.compat.v1.Session(server.target, graph=g, config=cfg) as sess:
        if a.task == 0:
            sess.run(init)
        while len(sess.run(missing)):
            time.sleep(0.05)
        for _ in range(3):
            sess.run(pull)
        with atomic_path(a.ready) as tmp:
            tmp.write_text("ready\n")
        while not a.go.exists():
            time.sleep(0.01)
        start = float(json.loads(a.go.read_text())["start"])
        steps = []
        reps = range(a.reps)
        shown = progress(reps, desc="[calibrate] pull races", unit="race") if a.task == 0 else reps
        for r in shown:
            t = start + r * a.gap + a.task * a.offset
            time.sleep(max(0.0, t - time.time()))
            t0 = time.time()
            sess.run(pull)
            steps.append([t, t0, time.time()])
    with atomic_path(a.out) as tmp:
        tmp.write_text(json.dumps({"steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
