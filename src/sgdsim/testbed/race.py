"""One worker of the races that :mod:`sgdsim.testbed.calibrate` runs to measure
the join delays.

Each worker of a two-worker cluster moves ``--tensors`` float32 tensors of
``--floats`` elements each in ``--reps`` timed steps: with ``--direction
pull`` it reads the same variables from the PS (summed on the worker); with
``push`` it sends tensors of its own to the PS, which subtracts them from
variables of this worker's (as a gradient update). After three untimed
warm-up steps it writes ``--ready`` and waits for ``--go`` (``{"start": epoch
s}``); step ``r`` of task ``k`` then starts at ``start + r × gap + k ×
offset``. Task 0 creates and initializes the PS variables; the other waits
until they exist.

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
    p.add_argument("--direction", choices=("pull", "push"), default="pull")
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
            # pulls read shared variables; each worker pushes into its own
            owners = [""] if a.direction == "pull" else ["_0", "_1"]
            ps_vars = {
                o: [
                    tf.compat.v1.get_variable(
                        f"race{o}_{i}",
                        [a.floats],
                        initializer=tf.compat.v1.zeros_initializer(),
                        use_resource=True,
                    )
                    for i in range(a.tensors)
                ]
                for o in owners
            }
        vs = [v for group in ps_vars.values() for v in group]
        local: list = []
        with tf.device(f"/job:worker/task:{a.task}"):
            if a.direction == "pull":
                step = tf.add_n([tf.reduce_sum(tf.identity(v.read_value())) for v in vs])
            else:
                local = [
                    tf.compat.v1.get_variable(
                        f"grad_{a.task}_{i}",
                        [a.floats],
                        initializer=tf.compat.v1.ones_initializer(),
                        use_resource=True,
                        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                    )
                    for i in range(a.tensors)
                ]
        if a.direction == "push":
            with tf.device("/job:ps/task:0"):
                mine = ps_vars[f"_{a.task}"]
                step = tf.group(
                    *[v.assign_sub(x.read_value()) for v, x in zip(mine, local, strict=True)]
                )
        init = tf.compat.v1.variables_initializer(vs)
        init_local = tf.compat.v1.variables_initializer(local)
        missing = tf.compat.v1.report_uninitialized_variables(vs)
    cfg = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=a.threads, inter_op_parallelism_threads=a.threads
    )
    with tf.compat.v1.Session(server.target, graph=g, config=cfg) as sess:
        if a.task == 0:
            sess.run(init)
        sess.run(init_local)
        while len(sess.run(missing)):
            time.sleep(0.05)
        for _ in range(3):
            sess.run(step)
        with atomic_path(a.ready) as tmp:
            tmp.write_text("ready\n")
        while not a.go.exists():
            time.sleep(0.01)
        start = float(json.loads(a.go.read_text())["start"])
        steps = []
        reps = range(a.reps)
        desc = f"[calibrate] {a.direction} races"
        shown = progress(reps, desc=desc, unit="race") if a.task == 0 else reps
        for r in shown:
            t = start + r * a.gap + a.task * a.offset
            time.sleep(max(0.0, t - time.time()))
            t0 = time.time()
            sess.run(step)
            steps.append([t, t0, time.time()])
    with atomic_path(a.out) as tmp:
        tmp.write_text(json.dumps({"steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
