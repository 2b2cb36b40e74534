"""Writing result files so that a reader never sees half of one and nothing is lost by accident."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | Path, text: str, *, encoding: str = "utf-8",
                      durable: bool = False) -> Path:
    """Writes ``text`` to a temporary file beside ``path`` and renames it over ``path``: a crash or a
    concurrent reader sees the old file or the new one, never a mix (see :func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode(encoding), durable=durable)


def write_bytes_atomic(path: str | Path, data: bytes, *, durable: bool = False) -> Path:
    """Writes ``data`` to a temporary file beside ``path`` and renames it over ``path``.

    ``durable`` also flushes the data and the rename to disk, for files other processes start from
    (a policy every rank of a job loads). The file gets the permissions of any file the user writes,
    not the temporary file's private 0600. An OSError leaves the previous file untouched.
    """
    path = Path(path)
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)
    return path


def check_writable_file(path: str | Path, *, overwrite: bool, what: str = "output") -> Path:
    """The problems a user can fix before any work starts, each as one ValueError naming the fix:
    an empty name, a folder where a file goes, a missing or read-only folder, an existing file
    without ``overwrite``."""
    text = str(path)
    if not text.strip():
        raise ValueError(f"the {what} path is empty; give a file name")
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"{path} is a folder; give a file path for the {what}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{parent} does not exist; create the folder or pick another {what} path")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{parent} is not writable; pick another {what} path")
    if path.exists() and not overwrite:
        raise ValueError(f"{path} already exists; pass --force to replace it or pick another path")
    return path
