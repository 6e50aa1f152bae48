"""Atomic file output: write under a temporary name, then rename.

A crash or Ctrl-C leaves either the complete old output, the complete new
output, or nothing, never a half-written file that a later stage could mistake
for a whole one (``os.replace`` is atomic within one file system, POSIX
rename(2)). Written files and their directories are fsynced before the rename,
so the rename never reaches the disk before the data it names (the ext4/XFS
"rename without fsync" hazard; see the "Data integrity" notes of rename(2) and
fsync(2)).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: renameat2(2) flag: swap two paths atomically (Linux >= 3.15; ext4, XFS, btrfs, tmpfs).
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path ``.NAME.tmp-PID`` beside ``path``; move it to ``path`` on success.

    Works for files and directories. The temporary (every file in it, for a
    directory) is fsynced, then moved into place, then the parent directory is
    fsynced. An existing directory at ``path`` is swapped with the new one in
    one step (Linux renameat2 ``RENAME_EXCHANGE``), so a reader sees the old or
    the new directory, never none; where that call is missing it is renamed
    aside (``.NAME.old-PID``), the new one renamed in, and the old one removed.
    On any exception the temporary is removed and ``path`` is left untouched.
    Temporaries left by dead processes (killed before they could clean up) are
    removed first, see :func:`remove_stale`.

    Raises:
        OSError: the directory cannot be created or written.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
        _fsync_tree(tmp)
        if final.is_dir() and not final.is_symlink():
            if not _exchange(tmp, final):
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                _remove(old)
                os.replace(final, old)
                os.replace(tmp, final)
                _fsync_dir(final.parent)
                _remove(old)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        _remove(tmp)


def remove_stale(path: str | os.PathLike[str]) -> list[Path]:
    """Remove ``.NAME.tmp-PID`` and ``.NAME.old-PID`` beside ``path`` whose process is dead.

    Temporaries of live processes (another job writing the same output) are
    kept. When ``path`` itself is missing and a dead process's renamed-aside
    ``.NAME.old-PID`` exists (killed between its two renames), that old output
    is put back first.

    Returns:
        The paths removed or restored.
    """
    final = Path(path)
    pattern = re.compile(rf"^\.{re.escape(final.name)}\.(tmp|old)-(\d+)$")
    found: list[tuple[str, int, Path]] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(final.parent):
            m = pattern.match(entry.name)
            if m and int(m.group(2)) != os.getpid() and not _alive(int(m.group(2))):
                found.append((m.group(1), int(m.group(2)), Path(entry.path)))
    done: list[Path] = []
    for kind, _, p in sorted(found, key=lambda t: (t[0] != "old", t[1])):
        if kind == "old" and not (final.exists() or final.is_symlink()):
            os.replace(p, final)
        else:
            _remove(p)
        done.append(p)
    if done:
        _fsync_dir(final.parent)
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


@functools.cache
def _renameat2() -> Any:
    name = ctypes.util.find_library("c")
    return None if name is None else getattr(ctypes.CDLL(name, use_errno=True), "renameat2", None)


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically; False where renameat2 is unavailable."""
    fn = _renameat2()
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(err, os.strerror(err), str(a))


def _fsync_tree(p: Path) -> None:
    """fsync a file, or every file and directory below a directory (deepest first)."""
    if p.is_symlink() or not p.exists():
        return
    if p.is_file():
        _fsync_fd(p, os.O_RDONLY)
        return
    for root, _, files in os.walk(p, topdown=False):
        for name in files:
            f = Path(root) / name
            if not f.is_symlink():
                _fsync_fd(f, os.O_RDONLY)
        _fsync_dir(Path(root))


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems refuse fsync on a directory
        _fsync_fd(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync_fd(p: Path, flags: int) -> None:
    fd = os.open(p, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink()
