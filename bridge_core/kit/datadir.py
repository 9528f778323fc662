"""One process per data directory: an OS lock on ``<data-dir>/lock`` (docs/security.md).

Whatever reads or writes a data directory's runtime state (``serve``, the Hermes
gateway's bridge, the offline ``loomi devices``/``revoke``) first takes the lock,
before it reads or writes anything else there: a second process on the same
directory would otherwise recover and delete the first's Loomi journal, replace
its admin key and remove its ``run/`` files. ``hold`` takes it without waiting:
a directory held by a live process is a one-line :class:`DataDirBusy` naming the
directory and the holder's pid, and nothing else in it is touched.

The lock is ``flock(LOCK_EX)`` on an open descriptor, held for as long as the
holder keeps it (``serve``: its whole life). The kernel drops it when the process
ends however it ends, so a holder killed with ``-9`` holds nothing and the next
``hold`` succeeds. The holder writes ``<pid> <role>`` into the file after locking;
that record is only read to name the holder, never trusted for whether the
directory is held (after a crash it names a dead process). The descriptor is
close-on-exec: a program the holder starts never inherits the lock. The file is
never deleted (a process waiting on the old inode would lock a file nobody else
sees). A local file system is assumed (``flock`` over NFS is not relied on).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from typing import Optional

from ..model.errors import ConfigError

LOCK_FILE = "lock"
# A lock found held while its record names no live process: a holder between its
# lock and its record, or a ``holder_pid`` probe of a moment. Tried again this long.
SETTLE_SECONDS = 0.5
_RECORD_MAX = 256


class DataDirBusy(ConfigError):
    """Another live process holds the data directory (exit non-zero, nothing touched)."""

    code = "data_dir_busy"
    default_message = "The data directory is in use by another process"

    def __init__(self, data_dir: str, pid: Optional[int], role: str = ""):
        self.data_dir, self.pid, self.role = data_dir, pid, role
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"the data directory {data_dir} is in use by {who}{f' ({role})' if role else ''}: "
                         "one process per data directory")


def lock_path(data_dir: str) -> str:
    return os.path.join(data_dir, LOCK_FILE)


class DirLock:
    """A held data directory; ``release()`` (or leaving the ``with`` block) lets it go."""

    def __init__(self, data_dir: str, fd: Optional[int], role: str):
        self.data_dir, self.role = data_dir, role
        self._fd: Optional[int] = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no record of a holder that is gone
        except OSError:  # read-only
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> "DirLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"DirLock({self.data_dir!r}, {self.role!r}, held={self.held})"


def hold(data_dir: str, role: str = "serve", *, create: bool = True) -> DirLock:
    """Take ``data_dir`` for this process (``role`` names it to a second one), without waiting.

    ``create``: make the directory (0700) when missing, else ``FileNotFoundError`` for a
    missing one. ``DataDirBusy`` when a live process holds it; ``ConfigError`` (one line)
    when the lock file cannot be opened."""
    if create:
        try:
            os.makedirs(data_dir, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot use the data directory {data_dir}: {exc.strerror or exc}")
    fd, writable = _open(data_dir, create)
    if fd is None:  # a read-only file system and no lock file: nobody can hold it, or write anything there
        return DirLock(data_dir, None, role)
    try:
        _lock(fd, data_dir)
        if writable:
            os.fchmod(fd, 0o600)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {role}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return DirLock(data_dir, fd, role)


def _open(data_dir: str, create: bool) -> tuple[Optional[int], bool]:
    """The lock file's descriptor (None: none on a read-only file system) and whether it is writable.
    On a read-only file system the lock still excludes (``flock`` needs no write access); what the
    holder then fails on is the error its user sees (the database cannot be opened)."""
    path, nofollow = lock_path(data_dir), getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | nofollow, 0o600), True
    except FileNotFoundError:
        if create:
            raise ConfigError(f"cannot use the data directory {data_dir}: it disappeared")
        raise
    except OSError as exc:
        if exc.errno == errno.EROFS:
            try:
                return os.open(path, os.O_RDONLY | os.O_CLOEXEC | nofollow), False
            except FileNotFoundError:
                return None, False
            except OSError:
                pass
        raise ConfigError(f"cannot use the data directory {data_dir}: {exc.strerror or exc}")


def _lock(fd: int, data_dir: str) -> None:
    """``flock(LOCK_EX | LOCK_NB)`` on ``fd``; ``DataDirBusy`` at once when a live process holds it."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigError(f"cannot lock the data directory {data_dir}: {exc.strerror or exc}")
        pid, role = _read_record(fd)
        if pid is not None and _alive(pid):
            raise DataDirBusy(data_dir, pid, role)
        if time.monotonic() >= deadline:  # held, by a process its record does not name
            raise DataDirBusy(data_dir, None)
        time.sleep(0.01)  # a holder between its lock and its record, or a probe of a moment


def holder(data_dir: str) -> Optional[tuple[Optional[int], str]]:
    """Who holds ``data_dir`` without taking it: ``(pid, role)`` (pid None when it wrote no record
    yet), or None when no process does (also when there is no lock file, or no directory)."""
    try:
        fd = os.open(lock_path(data_dir), os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read_record(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holder_pid(data_dir: str) -> Optional[int]:
    """The pid of the live process holding ``data_dir``, or None (see ``holder``)."""
    found = holder(data_dir)
    return found[0] if found else None


def _read_record(fd: int) -> tuple[Optional[int], str]:
    try:
        text = os.pread(fd, _RECORD_MAX, 0).decode("ascii", "replace")
    except OSError:
        return None, ""
    first, _, role = text.strip().partition(" ")
    pid = int(first) if first.isdigit() and int(first) > 0 else None
    return pid, "".join(c for c in role.strip() if c.isprintable())[:64]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


__all__ = ["DataDirBusy", "DirLock", "LOCK_FILE", "hold", "holder", "holder_pid", "lock_path"]
