"""Entry point of a parameter-server process: ``python -m sgdsim.profiling.server``.

Runs a ``tf.distribute.Server`` for one task of the cluster and exits after
``--lifetime`` seconds at the latest, so a forgotten PS never outlives its run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cluster", required=True, help="cluster spec as JSON")
    p.add_argument("--job", default="ps")
    p.add_argument("--task", type=int, default=0)
    p.add_argument("--intra", type=int, default=2)
    p.add_argument("--inter", type=int, default=2)
    p.add_argument("--lifetime", type=float, required=True, help="seconds before exiting")
    a = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    timer = threading.Timer(a.lifetime, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    import tensorflow as tf

    cfg = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=a.intra, inter_op_parallelism_threads=a.inter
    )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(json.loads(a.cluster)),
        job_name=a.job,
        task_index=a.task,
        config=cfg,
    )
    print(f"[ps] {a.job}:{a.task} serving at {server.target}", file=sys.stderr, flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
