"""A throw-away one-node SLURM cluster (Debian's slurm-wlm and munge) for tests.

Everything lives in one temporary directory: the munge key and socket, a
generated ``slurm.conf`` (no cgroups, no accounting database), the daemons'
state, spool, logs and PID files. Clients find the cluster through
``SLURM_CONF`` (see :attr:`SlurmCluster.env`), so a system-wide SLURM, if
any, is never touched. :meth:`SlurmCluster.stop` cancels every job, stops the
daemons it started (by their own PIDs) and removes the directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sgdsim.profiling.procs import free_ports, spawn, stop

#: Debian programs the cluster needs (packages slurm-wlm and munge).
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol")

#: Name of the cluster's one partition.
PARTITION = "debug"


def unavailable() -> str | None:
    """Why a cluster cannot be started here, or None when it can."""
    if os.geteuid() != 0:
        return "a SLURM cluster needs root (slurmd runs jobs as their users)"
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return (
            f"{', '.join(missing)} not installed: run `make system-deps` as root "
            "(apt-get install slurm-wlm munge)"
        )
    return None


def node_hardware() -> dict[str, str]:
    """This machine as slurmd sees it (``slurmd -C``): CPUs, SocketsPerBoard,
    CoresPerSocket, ThreadsPerCore, RealMemory (MB), ... as strings."""
    out = subprocess.run(
        ["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


SLURM_CONF = """\
ClusterName=sgdtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups: processes tracked through /proc, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# no slurmdbd: sacct has no data, the executor polls with squeue, which
# lists finished jobs for MinJobAge seconds (the executor needs >= 120; the
# test checks every job of the run, so none may be purged before it ends)
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=3600
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
KillWait=5
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 State=UNKNOWN {hardware}
PartitionName={partition} Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """One node (``localhost``: this machine's CPUs and memory as ``slurmd -C``
    finds them), one partition (:data:`PARTITION`), munged + slurmctld +
    slurmd in ``workdir``.

    Raises:
        RuntimeError: a daemon did not start, or the node did not become idle
            within ``timeout_s`` seconds (its logs are in the message).
    """

    def __init__(self, workdir: Path, timeout_s: float = 60.0) -> None:
        self.dir = workdir
        self.hw = node_hardware()
        self.cpus = int(self.hw["CPUs"])
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.conf = self.dir / "slurm.conf"
        self.bin = self.dir / "bin"
        self.env = {
            **os.environ,
            "SLURM_CONF": str(self.conf),
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, *argv: str) -> None:
        # in its own process group, killed if this process dies
        self.procs[Path(argv[0]).name] = spawn(argv, self.env)

    def _start(self, timeout_s: float) -> None:
        for sub in ("state", "spool", "bin"):
            (self.dir / sub).mkdir(parents=True)
        # The executor's job step drops every SLURM_* variable before it calls srun,
        # so srun would look for /etc/slurm/slurm.conf; this srun on PATH passes the
        # cluster's config instead, and the system's SLURM config stays untouched.
        srun = self.bin / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {shutil.which("srun")} "$@"\n')
        srun.chmod(0o755)
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._spawn(
            shutil.which("munged") or "munged",
            "--foreground",
            "--force",  # root, and a key below a world-writable /tmp
            f"--socket={self.dir / 'munge.socket'}",
            f"--key-file={key}",
            f"--pid-file={self.dir / 'munged.pid'}",
            f"--log-file={self.dir / 'munged.log'}",
            f"--seed-file={self.dir / 'munged.seed'}",
        )
        self._wait(lambda: (self.dir / "munge.socket").exists(), 10, "munged socket")
        ctld_port, d_port = free_ports(2)
        self.conf.write_text(
            SLURM_CONF.format(
                dir=self.dir,
                ctld_port=ctld_port,
                d_port=d_port,
                hardware=" ".join(
                    f"{k}={self.hw[k]}"
                    for k in (
                        "CPUs",
                        "SocketsPerBoard",
                        "CoresPerSocket",
                        "ThreadsPerCore",
                        "RealMemory",
                    )
                ),
                partition=PARTITION,
            )
        )
        self._spawn(shutil.which("slurmctld") or "slurmctld", "-D", "-i", "-f", str(self.conf))
        self._spawn(
            shutil.which("slurmd") or "slurmd", "-D", "-N", "localhost", "-f", str(self.conf)
        )
        self._wait(self._node_idle, timeout_s, "node localhost idle")

    def _node_idle(self) -> bool:
        r = self.run("sinfo", "--noheader", "--format=%T", check=False)
        return r.returncode == 0 and r.stdout.strip().rstrip("*") == "idle"

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}):\n{self.logs()}")
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}:\n{self.logs()}")

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a SLURM client command against this cluster (30 s timeout)."""
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=30, check=check
        )

    def logs(self, tail: int = 40) -> str:
        """The last ``tail`` lines of each daemon's log."""
        out = []
        for f in sorted(self.dir.glob("*.log")):
            lines = f.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"== {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def jobs(self) -> list[str]:
        """Lines ``id|name|state`` of the jobs slurmctld still knows (finished ones too)."""
        r = self.run("squeue", "--states=all", "--noheader", "--format=%i|%j|%T", check=False)
        return r.stdout.split()

    def stop(self) -> None:
        """Cancel every job, wait for them to end (≤ 30 s), stop the daemons and
        remove the directory."""
        if self.conf.exists() and self.procs and all(p.poll() is None for p in self.procs.values()):
            self.run("scancel", "--user=root", check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                states = [j.rsplit("|", 1)[-1] for j in self.jobs()]
                if not any(s in ("PENDING", "RUNNING", "COMPLETING") for s in states):
                    break
                time.sleep(1)
        for p in reversed(self.procs.values()):
            stop(p, grace_s=10.0)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
