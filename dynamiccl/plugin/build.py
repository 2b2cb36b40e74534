"""Where the NCCL tuner plugin is, and how to (re)build it with the machine's C compiler.

The one library is both NCCL's tuner plugin (``NCCL_TUNER_PLUGIN``) and its profiler plugin
(``NCCL_PROFILER_PLUGIN``, :mod:`dynamiccl.plugin.profile_ring`). The package build (scikit-build-core +
CMake) installs ``dynamiccl/lib/libnccl-tuner-dynamiccl.so``. When that file is missing (an install
without a build step) or older than the C sources next to it (an editable install whose sources
changed), the plugin is compiled into a user cache instead, keyed by a digest of the sources and
flags, so a stale library is never handed to NCCL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from dynamiccl.files import write_text_atomic
from dynamiccl.plugin.policy_format import stale_headers, stale_message
from dynamiccl.system.nccl import GET_VERSION_SYMBOL
from dynamiccl.system.nccl_versions import NcclVersion

LIBRARY_NAME = "libnccl-tuner-dynamiccl.so"
#: The ABI versions the plugin exports, newest first (NCCL's loader tries them in this order).
ABI_VERSIONS = (6, 5, 4, 3, 2)
EXPORTED_SYMBOLS = tuple(f"ncclTunerPlugin_v{v}" for v in ABI_VERSIONS)
#: The profiler ABI versions it exports (csrc/profiler.c), newest first: NCCL 2.29+ loads v6,
#: 2.28 v5, 2.27 v4.
PROFILER_ABI_VERSIONS = (6, 5, 4)
PROFILER_SYMBOLS = tuple(f"ncclProfiler_v{v}" for v in PROFILER_ABI_VERSIONS)
#: The run-time entry points dynamiccl.runtime calls through ctypes (documented in csrc/tuner.c).
RUNTIME_FUNCTIONS = ("dynamiccl_set_context", "dynamiccl_policy_hash", "dynamiccl_plugin_version",
                     "dynamiccl_pin", "dynamiccl_pin_knobs", "dynamiccl_pin_counts")
CACHE_ENV = "DYNAMICCL_CACHE_DIR"
#: The compiler flags, one per line, shared with the CMake build (and read by clangd).
FLAGS_FILE = "compile_flags.txt"

#: The first tuner ABI each NCCL release loads (its ``src/plugin/tuner.cc``), as (first version
#: code, ABI).
_FIRST_ABI_BY_NCCL = ((23003, 6), (22803, 5), (22403, 4), (22203, 3), (22105, 2))


class PluginError(RuntimeError):
    """The plugin cannot be found or built; the message says what to install or run."""


def source_dir() -> Path | None:
    """The C sources, present in a source checkout or editable install (not in a wheel)."""
    folder = resources.files("dynamiccl.plugin") / "csrc"
    path = Path(str(folder))
    return path if (path / FLAGS_FILE).is_file() else None


def sources(src: Path) -> list[Path]:
    """The plugin's translation units: every .c file of the folder, as CMake globs them."""
    return sorted(src.glob("*.c"))


def headers(src: Path) -> list[Path]:
    return sorted(src.glob("*.h"))


def cflags(src: Path) -> tuple[str, ...]:
    """The flags both builds use: C11, hidden visibility (only the ABI structs and the run-time
    entry points are exported), warnings on."""
    return tuple(line.strip() for line in (src / FLAGS_FILE).read_text().splitlines() if line.strip())


def packaged_library() -> Path | None:
    """The library the package build installed, if any."""
    candidate = Path(str(resources.files("dynamiccl") / "lib" / LIBRARY_NAME))
    if candidate.is_file():
        return candidate
    # Editable installs keep the built library in site-packages, outside the resource path.
    for entry in sys.path:
        candidate = Path(entry or ".") / "dynamiccl" / "lib" / LIBRARY_NAME
        if candidate.is_file():
            return candidate
    return None


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dynamiccl"


def find_compiler(cc: str | None = None) -> str:
    """``cc`` if given (it must exist), else ``$CC``, else the first of cc, gcc, clang."""
    if cc:
        if shutil.which(cc):
            return cc
        raise PluginError(f"C compiler {cc!r} not found: give an installed one (e.g. gcc)")
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    raise PluginError("no C compiler found: install one (e.g. `apt-get install gcc`) or set CC")


def _digest(paths: Sequence[Path], flags: Sequence[str], compiler: str) -> str:
    h = hashlib.sha256(" ".join([compiler, *flags]).encode())
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def compile_c(
    sources: Sequence[Path],
    output_name: str,
    *,
    flags: Sequence[str] = (),
    shared: bool = False,
    cc: str | None = None,
    cache: Path | None = None,
    depends: Sequence[Path] = (),
    force: bool = False,
    symbols: Sequence[str] = (),
) -> Path:
    """Compiles ``sources`` into ``cache/<digest>/output_name`` unless that exact build exists.

    The digest covers the sources, ``depends`` (headers), compiler and flags, so variants (the
    sanitizer builds of the tests, the benchmark's driver) coexist and are built once. What the
    compiler made is checked (:func:`output_problem`: an ELF file exporting ``symbols``) before it is
    kept, so a "compiler" that exits 0 having made nothing (``--cc /bin/true``) is refused.
    """
    compiler = find_compiler(cc)
    all_flags = [*flags, *(["-shared"] if shared else [])]
    out = (cache or cache_dir()) / _digest([*sources, *depends], all_flags, compiler) / output_name
    if out.is_file() and not force and output_problem(out, symbols) is None:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{output_name}.")
    os.close(fd)
    # libdl: the plugin reads NCCL's version and pins itself loaded (dlsym, dladdr, dlopen), and
    # the test programs load it; glibc before 2.34 keeps those outside libc.
    cmd = [compiler, *all_flags, *(str(s) for s in sources), "-o", tmp, "-ldl", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    problem = None if proc.returncode else output_problem(Path(tmp), symbols)
    if proc.returncode or problem:
        os.unlink(tmp)
        with contextlib.suppress(OSError):
            out.parent.rmdir()  # made for this build only
        if proc.returncode:
            raise PluginError(f"compiling {output_name} failed ({' '.join(cmd)}):\n{proc.stderr}")
        raise PluginError(f"compiling {output_name} with {compiler} exited 0, but {problem}")
    os.chmod(tmp, 0o755)  # a program or library of the user's, not mkstemp's private file
    os.replace(tmp, out)  # atomic: a concurrent user never sees a half-written library
    return out


#: The bytes every ELF file (Linux's programs and shared libraries) starts with.
ELF_MAGIC = b"\x7fELF"


def output_problem(path: Path, symbols: Sequence[str] = ()) -> str | None:
    """Why ``path`` is not what a C compiler makes (empty, not ELF, without the ``symbols`` NCCL
    looks up), in words; None when it is."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(len(ELF_MAGIC))
    except OSError as exc:
        return f"its output cannot be read ({exc.strerror or exc})"
    if head != ELF_MAGIC:
        return (f"it made {size} bytes that are no ELF program or library: is it a C compiler? give "
                "one with --cc (e.g. gcc) or set CC")
    if symbols and shutil.which("nm"):
        try:
            exported = exported_symbols(path)
        except subprocess.CalledProcessError:
            return "it made an ELF file whose symbols nm cannot list: not a shared library"
        missing = [s for s in symbols if s not in exported]
        if missing:
            return (f"the library exports no {', '.join(missing)}, which NCCL looks up: the compiler "
                    "or its flags left them out; build with gcc or clang")
    return None


def check_headers(src: Path) -> None:
    """PluginError (one line, with the command that regenerates them) where the generated headers in
    ``src`` are out of date with the Python side: a plugin built from them would read policy files
    by another table of NCCL's algorithms than the one that wrote them."""
    stale = stale_headers(src)
    if stale:
        raise PluginError(stale_message(stale))


def build(
    *,
    flags: Sequence[str] = (),
    cc: str | None = None,
    cache: Path | None = None,
    force: bool = False,
) -> Path:
    """Builds the plugin from the package's C sources; ``flags`` add to :func:`cflags`."""
    src = source_dir()
    if src is None:
        raise PluginError(
            "the C sources are not installed with this package; reinstall dynamiccl from source "
            "(pip install dynamiccl --no-binary dynamiccl) so the build step compiles the plugin"
        )
    check_headers(src)
    return compile_c(sources(src), LIBRARY_NAME, flags=[*cflags(src), *flags], shared=True, cc=cc,
                     cache=cache, depends=[*headers(src), src / FLAGS_FILE], force=force,
                     symbols=(*EXPORTED_SYMBOLS, *PROFILER_SYMBOLS))


def _is_stale(library: Path, src: Path) -> bool:
    newest = max(f.stat().st_mtime for f in (*sources(src), *headers(src), src / FLAGS_FILE))
    return library.stat().st_mtime < newest


#: File in the cache naming the library ``dynamiccl plugin build`` made last, and the digest of
#: the sources it was built from (the cache is the user's, shared by every checkout they build in).
LAST_BUILD = "last-build"


def _sources_digest(src: Path) -> str:
    return _digest([*sources(src), *headers(src), src / FLAGS_FILE], (), "")


def remember_build(library: Path) -> None:
    """Records ``library`` as the user's own build, so ``plugin path`` names it from now on (while
    the sources are the ones it was built from)."""
    record = cache_dir() / LAST_BUILD
    record.parent.mkdir(parents=True, exist_ok=True)
    src = source_dir()
    write_text_atomic(record, f"{library}\n{_sources_digest(src) if src else ''}\n")


def _remembered_build(src: Path | None) -> Path | None:
    """The library ``plugin build`` made, while it exists and was built from these sources (not
    another checkout's, nor older ones)."""
    try:
        path, _, digest = (cache_dir() / LAST_BUILD).read_text().partition("\n")
    except OSError:
        return None
    library = Path(path.strip())
    if not library.is_file() or (src is not None and digest.strip() != _sources_digest(src)) \
            or output_problem(library) is not None:  # a build an older version let through
        return None
    return library


def library_path(*, build_if_missing: bool = True) -> Path:
    """The plugin NCCL should load: the user's last ``plugin build`` if current, else the packaged
    build if current, else a cached local build."""
    src = source_dir()
    remembered = _remembered_build(src)
    if remembered is not None:
        return remembered
    packaged = packaged_library()
    if packaged is not None and (src is None or not _is_stale(packaged, src)):
        return packaged
    if src is not None and build_if_missing:
        return build()
    raise PluginError(
        "the tuner plugin is not built: run `dynamiccl plugin build` (needs a C compiler)"
    )


def exported_symbols(library: Path) -> dict[str, int]:
    """Defined dynamic symbols and their sizes in bytes (``nm -D --defined-only -S``): exactly
    what NCCL's dlsym can see."""
    if not shutil.which("nm"):
        raise PluginError("`nm` (binutils) is needed to list the plugin's symbols")
    proc = subprocess.run(["nm", "-D", "--defined-only", "-S", str(library)], capture_output=True,
                          text=True, check=True)
    symbols = {}
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) == 4:  # value, size, type, name (symbols without a size have 3 fields)
            symbols[fields[3]] = int(fields[1], 16)
        elif len(fields) == 3:
            symbols[fields[2]] = 0
    return symbols


def first_abi_loaded(nccl_version_code: int) -> int | None:
    """The tuner ABI version a given NCCL (``ncclGetVersion`` code, e.g. 23007) loads first."""
    for first_code, abi in _FIRST_ABI_BY_NCCL:
        if nccl_version_code >= first_code:
            return abi
    return None


def find_nccl_library() -> Path | None:
    """``libnccl.so.2`` from the ``nvidia-nccl-cu1x`` wheel, if installed."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
        if candidate.is_file():
            return candidate
    return None



def installed_nccl_version() -> NcclVersion | None:
    """The release of the NCCL library this Python environment installs (:func:`find_nccl_library`,
    the wheel torch brings), as its ``ncclGetVersion`` reports it; None where there is none or it
    cannot be loaded. Loading it starts nothing on a GPU."""
    import ctypes

    path = find_nccl_library()
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
        code = ctypes.c_int(0)
        if getattr(library, GET_VERSION_SYMBOL)(ctypes.byref(code)) != 0 or code.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return NcclVersion.from_code(code.value)


def tuner_library_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a tuner plugin NCCL could load (missing, not a regular file, no ELF
    shared library, no ``ncclTunerPlugin_vN`` exported), in words; None when it is one. NCCL says
    nothing when it cannot load the plugin it is given and decides every call itself."""
    path = Path(path)
    if not path.exists():
        return "no such file"
    if not path.is_file():
        return "not a regular file"
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(ELF_MAGIC))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if head != ELF_MAGIC:
        return "not a shared library (no ELF header)"
    if shutil.which("nm"):
        try:
            exported = exported_symbols(path)
        except subprocess.CalledProcessError:
            return "an ELF file whose symbols nm cannot list: not a shared library"
        if not any(s in exported for s in EXPORTED_SYMBOLS):
            return f"exports no {EXPORTED_SYMBOLS[-1][:-1]}N: not a tuner plugin"
    return None
