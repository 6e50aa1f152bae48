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
import socket
import subprocess
import time
from pathlib import Path

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _real_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("/proc/meminfo has no MemTotal")


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
# lists finished jobs for MinJobAge seconds
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=300
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
KillWait=5
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName={partition} Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """One node (``localhost``, this machine's CPUs and memory), one partition
    (:data:`PARTITION`), munged + slurmctld + slurmd in ``workdir``.

    Raises:
        RuntimeError: a daemon did not start, or the node did not become idle
            within ``timeout_s`` seconds (its logs are in the message).
    """

    def __init__(self, workdir: Path, timeout_s: float = 60.0) -> None:
        self.dir = workdir
        self.cpus = os.cpu_count() or 1
        self.mem_mb = _real_memory_mb()
        self.procs: list[subprocess.Popen[bytes]] = []
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
        log = (self.dir / f"{Path(argv[0]).name}.out").open("wb")
        self.procs.append(
            subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        )

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
        self.conf.write_text(
            SLURM_CONF.format(
                dir=self.dir,
                ctld_port=_free_port(),
                d_port=_free_port(),
                cpus=self.cpus,
                mem_mb=self.mem_mb,
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

    def _wait(self, ready: object, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():  # type: ignore[operator]
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited ({p.returncode}):\n{self.logs()}")
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
        for f in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
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
        if self.conf.exists() and self.procs and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--user=root", check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                states = [j.rsplit("|", 1)[-1] for j in self.jobs()]
                if not any(s in ("PENDING", "RUNNING", "COMPLETING") for s in states):
                    break
                time.sleep(1)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
