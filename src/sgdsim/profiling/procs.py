"""Child processes that always end: they die with their parent and on timeout."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux prctl(PR_SET_PDEATHSIG, SIGKILL): the child is killed when we die."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    os.setpgrp()


def spawn(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group; it is SIGKILLed if this process dies."""
    err = sys.stderr if hasattr(sys.stderr, "fileno") else None
    return subprocess.Popen(
        list(argv), env=env, stdout=err, stderr=err, preexec_fn=_die_with_parent
    )


def stop(proc: subprocess.Popen[bytes], grace_s: float = 3.0) -> None:
    """Terminate ``proc`` and its process group; SIGKILL after ``grace_s`` seconds."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def free_ports(n: int) -> list[int]:
    """Return ``n`` distinct free TCP ports on 127.0.0.1 (held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ps_argv(
    cluster: dict[str, list[str]], intra: int, inter: int, lifetime_s: float, task: int = 0
) -> list[str]:
    """Command line of PS task ``task`` of ``cluster`` (threads, and seconds before it exits)."""
    return [
        sys.executable,
        "-m",
        "sgdsim.profiling.server",
        "--cluster",
        json.dumps(cluster),
        "--job",
        "ps",
        "--task",
        str(task),
        "--intra",
        str(intra),
        "--inter",
        str(inter),
        "--lifetime",
        f"{lifetime_s:.0f}",
    ]
