"""Writing result files so that a reader never sees half of one and nothing is lost by accident.

Every command that writes goes through here twice: :func:`claim_output` before any work (never one
of the command's own inputs, never a file another program wrote, ``--force`` only over a file of
the kind the command writes), then an atomic write (:func:`write_text_atomic`,
:func:`replace_atomically`). Each writer names what it writes as a :class:`FileKind`.

The write checks the claim again: a path that was free when claimed is taken with a hard link,
which fails where a file appeared meanwhile (another program's, or a second run of the same
command started at the same time), so the file that is there stays and the write is refused
(:class:`OutputRefused`); a file that was replaced meanwhile by one of another kind is not
overwritten either.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
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

    def fill(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())

    return replace_atomically(path, fill, durable=durable)


def replace_atomically(path: str | Path, fill: Callable[[Path], object], *,
                       durable: bool = False) -> Path:
    """``fill(tmp)`` writes a temporary file beside ``path`` (a figure, a YAML dump, a checkpoint),
    which is then renamed over ``path``: never half a file, and a failure leaves the old one."""
    path = Path(path)
    folder = path.parent
    claim = _claims.get(_claim_key(path))
    if claim is not None:
        claim.check_unchanged(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        fill(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        if claim is not None and claim.found is None:
            _put_new(Path(tmp), path, claim.force)
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if claim is not None:
        claim.found = _identity(path)
    _written.setdefault(_claim_key(path), path)
    if durable:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)
    return path


# ---------------------------------------------------------------------------------------------
# Claiming an output path before any work: never an input, never a file another program wrote
# ---------------------------------------------------------------------------------------------

#: Bytes of an existing file read to tell what wrote it.
HEAD_BYTES = 65536
#: Files under an input folder compared with an output path (a folder of logs holds a few hundred).
MAX_INPUT_FILES = 100_000


class OutputRefused(ValueError):
    """An output path a command must not write to; the message names the path and the fix."""


def _identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, change time) of the file at ``path`` itself (not where a link points): another
    file there, or this one written to, has another (an inode number is soon reused); None if none."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _claim_key(path: str | Path) -> str:
    return os.path.abspath(path)


@dataclass
class _Claim:
    """What was at a claimed output path when it was claimed, and what may replace it."""

    kind: FileKind
    found: tuple[int, int, int] | None
    #: --force was given (the fix a refusal names is then another path only).
    force: bool = False
    #: The path as the command named it.
    path: Path = Path()

    def check_unchanged(self, path: Path) -> None:
        now = _identity(path)
        if now is None or now == self.found:
            return
        if self.found is None:
            raise _appeared(path, self.force)
        try:
            ours = self.kind.written_by(path)
        except OSError:
            ours = False
        if not ours:
            raise OutputRefused(f"{path} was replaced by another program while this command ran "
                                f"and is not {self.kind.name}; it is kept and nothing was written "
                                "(pick another path)")


def _appeared(path: Path, force: bool) -> OutputRefused:
    fix = "pick another path" if force else "pick another path, or pass --force to replace it"
    return OutputRefused(f"{path} was created by another program while this command ran (or by "
                         f"another run of it started at the same time); it is kept and nothing "
                         f"was written ({fix})")


#: The outputs this process claimed (:func:`claim_output`), by absolute path.
_claims: dict[str, _Claim] = {}
#: The files this process wrote, by absolute path, as the command named them.
_written: dict[str, Path] = {}


def forget_claims() -> None:
    """Ends the claims, and the record of files written, of a command that has finished (a
    process that runs several)."""
    _claims.clear()
    _written.clear()


def outputs_so_far() -> tuple[list[Path], list[Path]]:
    """What a command stopped half-way leaves its user: the files it has written, in order (each
    whole), and the outputs it claimed and has not written."""
    return list(_written.values()), [c.path for key, c in _claims.items() if key not in _written]


def _put_new(tmp: Path, path: Path, force: bool) -> None:
    """``tmp`` becomes ``path`` only if nothing is at ``path``: a hard link cannot replace a file,
    so of two writers racing for one name exactly one wins. Where the file system has no hard
    links, the rename is preceded by a last look."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _appeared(path, force) from None
    except OSError:  # no hard links here (some FUSE and network file systems)
        if os.path.lexists(path):
            raise _appeared(path, force) from None
        os.replace(tmp, path)
        return
    tmp.unlink()


@dataclass(frozen=True)
class FileKind:
    """What a command writes, and how to recognise a file it (or its twin) wrote before: ``--force``
    replaces a file of this kind only, never a log, a model or a user's own file of the same name.

    ``reuse``: an existing file of this kind is replaced (a plot a re-run redraws) or appended to (a
    record file) without ``--force``.
    """

    name: str
    written_by: Callable[[Path], bool]
    reuse: bool = False


def starts_with(*prefixes: bytes) -> Callable[[Path], bool]:
    """A ``written_by`` test: the file starts with one of ``prefixes``."""

    def test(path: Path) -> bool:
        first = read_head(path, max(len(p) for p in prefixes))
        return any(first.startswith(p) for p in prefixes)

    return test


def read_head(path: str | Path, size: int = HEAD_BYTES) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(size)


#: Characters of a line a text reader keeps (a log or record line is at most a few kilobytes): a
#: longer line is cut there, its rest passed over without being held.
MAX_LINE_CHARS = 1 << 16


def text_lines(path: str | Path, *, errors: str = "replace") -> Iterator[str]:
    """The lines of a text file one at a time, without their line ends, each cut at
    :data:`MAX_LINE_CHARS` (a reader tells a cut line by its length): memory is bounded whatever the
    file, where ``read_text().splitlines()`` holds all of it, several times over. A UTF-8
    byte-order mark is read past; other bytes that are not UTF-8 read as U+FFFD (``errors``:
    ``"strict"`` raises UnicodeDecodeError instead)."""
    with open(path, encoding="utf-8-sig", errors=errors) as fh:
        while line := fh.readline(MAX_LINE_CHARS):
            if not line.endswith("\n"):
                while (rest := fh.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                    pass  # the rest of a line longer than any a reader wants
            yield line.rstrip("\r\n")


def read_tail(path: str | Path, size: int = HEAD_BYTES) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - size))
        return fh.read(size)


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_file(path: str | Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (``"a FIFO (named
    pipe)"``, ``"a character device"``, ...), else None. Reading a FIFO blocks until a writer comes
    and ``/dev/zero`` never ends, so a command names such a file instead of opening it."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((what for test, what in _SPECIAL if test(mode)), None)


def not_regular_message(path: str | Path, what: str) -> str | None:
    """One line for a ``path`` the user gave as a ``what`` (e.g. "policy file") that is a FIFO, a
    device or a socket; None for a regular file, a folder or a missing path."""
    kind = special_file(path)
    return None if kind is None else f"{path} is {kind}, not a regular file; give the {what} itself"


def claim_output(path: str | Path, kind: FileKind, *, inputs: Iterable[str | Path] = (),
                 force: bool = False, flag: str = "-o") -> Path:
    """``path`` checked before any work as the place a command writes ``kind`` to; OutputRefused
    names what is wrong and the fix. Refused: an empty name, a folder, a missing or read-only
    folder, a FIFO/device/socket, any of the command's ``inputs`` (files, and files inside input
    folders; same inode or same resolved path, ``--force`` or not), an existing file that is not
    ``kind``, and an existing file of ``kind`` without ``force`` (unless ``kind.reuse``). ``flag``
    is the option that named the path; "" for a path the command derives (a sidecar beside its
    log), which the user cannot pick otherwise."""
    text = str(path)
    elsewhere = f"pick another {flag} path" if flag else "move it away"
    if not text.strip():
        raise OutputRefused(f"the {flag or 'output'} path is empty; give a file name")
    path = Path(text)
    if path.is_dir():
        raise OutputRefused(f"{path} is a folder; " + (f"give a file path for {flag}" if flag else
                                                        "move it away"))
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputRefused(f"{parent} does not exist; create the folder or {elsewhere}")
    if not os.access(parent, os.W_OK) or not takes_files(parent):
        raise OutputRefused(f"{parent} is not writable; " + (
            f"pick another {flag} path" if flag else "make it writable"))
    special = special_file(path)
    if special:
        raise OutputRefused(f"{path} is {special}, not a regular file; {elsewhere}")
    source = _same_as_input(path, inputs)
    if source is not None:
        which = "" if Path(source) == path else f" (as {source})"
        raise OutputRefused(f"{flag + ' ' if flag else ''}{path} is an input of this "
                            f"command{which}; writing it would destroy it, so pick another path")
    if not os.path.lexists(path):
        _claims[_claim_key(path)] = _Claim(kind, None, force, path)
        return path
    try:
        ours = kind.written_by(path)
    except OSError as exc:
        raise OutputRefused(f"cannot read {path} to check what it is ({exc.strerror or exc}); "
                            f"{elsewhere}") from None
    if not ours:
        raise OutputRefused(f"{path} exists and is not {kind.name}; refusing to replace it ("
                            + (f"move it away or pick another {flag} path)" if flag else
                               "move it away)"))
    if not force and not kind.reuse:
        raise OutputRefused(f"{path} already exists; pass --force to replace it" +
                            (" or pick another path" if flag else ""))
    _claims[_claim_key(path)] = _Claim(kind, _identity(path), force, path)
    return path


@contextmanager
def claimed_folder(path: str | Path, *, flag: str, holds: str, command: str) -> Iterator[Path]:
    """The folder a command writes several files into (``--out``), checked before any work and held
    while the command runs: created if missing (and removed again at the end if nothing was written
    into it), and locked, so that a second run of a command writing there is refused by name before
    it runs anything, rather than mixing its files with the first one's. ``holds`` says what the
    folder is for, ``command`` who holds it (both for the messages)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputRefused(f"{flag} {out} is a file; give a folder for {holds}")
    if not out.parent.is_dir():
        raise OutputRefused(f"{flag} {out}: its parent folder does not exist; create it first")
    created = False
    try:
        out.mkdir()
        created = True
    except FileExistsError:
        pass
    except OSError as exc:
        raise OutputRefused(f"{flag} {out}: cannot create the folder ({exc.strerror or exc}); pick "
                            f"another {flag}") from None
    try:
        try:
            handle = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise OutputRefused(f"{flag} {out}: cannot open the folder ({exc.strerror or exc}); "
                                f"pick another {flag}") from None
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise OutputRefused(f"{flag} {out} is being written by another `{command}` that "
                                    f"still runs; wait for it to end or pick another {flag}") from None
            yield out
        finally:
            os.close(handle)
    finally:
        if created:
            with suppress(OSError):  # not empty, or no longer a folder: it stays as it is
                out.rmdir()


def takes_files(folder: Path) -> bool:
    """Whether a new file can be made in ``folder``: the permission bits do not say (root may write
    anywhere they allow, but not into /proc or a read-only mount), so one is made and removed."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".dynamiccl-probe-")
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def distinct_outputs(*outputs: tuple[str, str | Path | None]) -> None:
    """Two outputs of one command (``-o x --plot x``) would overwrite each other: one line names them."""
    seen: dict[str, str] = {}
    for flag, path in outputs:
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise OutputRefused(f"{seen[key]} and {flag} name the same file {path}; give each its own")
        seen[key] = flag


def _same_as_input(path: Path, inputs: Iterable[str | Path]) -> str | None:
    """The input ``path`` would overwrite (itself, or a file inside an input folder), if any."""
    target = os.path.realpath(path)
    exists = path.exists()
    for given in inputs:
        if given is None or not str(given).strip():
            continue
        candidates: Iterable[str | Path] = (given,)
        if Path(given).is_dir():
            candidates = _files_under(Path(given))
        for candidate in candidates:
            if os.path.realpath(candidate) == target:
                return str(candidate)
            if exists:
                try:
                    if os.path.samefile(candidate, path):  # a hard link or another spelling
                        return str(candidate)
                except OSError:
                    continue
    return None


def _files_under(folder: Path) -> Iterator[Path]:
    for n, path in enumerate(p for p in folder.rglob("*") if not p.is_dir()):
        if n >= MAX_INPUT_FILES:
            return
        yield path
