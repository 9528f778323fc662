"""Owner-only files and directories: the one place the bridge makes them (docs/security.md, "Secrets").

Every directory the bridge owns in its data directory (the data directory itself, ``secrets/``,
``run/``, ``attachments/``) is 0700 and every file it writes there (the database, attachments,
Loomi's journal, secrets, keys, ``run/*.json``) is 0600, whatever the umask and whatever modes
an existing data directory had: a directory or file found with group or other bits loses them
(the owner's own bits are left alone, so a read-only directory stays read-only).
"""

from __future__ import annotations

import os
import stat
from typing import Union

DIR_MODE = 0o700
FILE_MODE = 0o600
_OPEN_TO_OTHERS = 0o077


def private_dir(path: str, files: bool = False) -> str:
    """``path`` as a directory only its owner may enter: created 0700, or stripped of its group and
    other bits when it exists. ``files``: its regular files too (an earlier version's, written 0644).
    OSError propagates (the caller says which directory could not be used)."""
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    _restrict(path, os.stat(path).st_mode)
    if files:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):  # a planted link is never followed
                    _restrict(entry.path, entry.stat(follow_symlinks=False).st_mode)
    return path


def open_private(path: str, flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
    """``os.open`` of a file only its owner may read: created 0600, or stripped of its group and
    other bits when it exists. The descriptor (the caller closes it)."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        mode = os.fstat(fd).st_mode
        if mode & _OPEN_TO_OTHERS:
            os.fchmod(fd, stat.S_IMODE(mode) & ~_OPEN_TO_OTHERS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: str, data: Union[bytes, str]) -> None:
    """``data`` into ``path``, owner-only, replacing it at once (written to ``path.tmp`` first)."""
    tmp = path + ".tmp"
    with os.fdopen(open_private(tmp), "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(tmp, path)


def _restrict(path: str, mode: int) -> None:
    if mode & _OPEN_TO_OTHERS:
        os.chmod(path, stat.S_IMODE(mode) & ~_OPEN_TO_OTHERS)


__all__ = ["DIR_MODE", "FILE_MODE", "open_private", "private_dir", "write_private"]
