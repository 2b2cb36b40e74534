"""The tuner plugin's run-time controls, bound with ctypes — the only place that knows their C names.

NCCL loads ``libnccl-tuner-dynamiccl.so`` with dlopen; opening the same file again here returns the
same loaded library (the dynamic loader keeps one copy per file), so a context switched or a choice
pinned through these functions is what the plugin's next ``getCollInfo`` sees. On a CPU-only job
NCCL never loads the library, and these calls run the plugin's real code in this process.

The C side (exported by the plugin next to its ``ncclTunerPlugin_vN`` structs)::

    int dynamiccl_set_context(const char* slice_spec);   /* 0 matched, 1 no slice matched, -1 bad */
    int dynamiccl_policy_hash(char* out, size_t len);     /* 0 ok, -1 none loaded / too small */
    const char* dynamiccl_plugin_version(void);
    int dynamiccl_pin_knobs(int collective, uint64_t min_bytes, uint64_t max_bytes,
                            const long long* knobs, int nknobs);  /* 0 ok, -1 bad input */
    int dynamiccl_pin_counts(uint64_t* forced, uint64_t* refused);  /* calls pins covered */
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from dynamiccl.plugin import build as plugin
from dynamiccl.system.knobs import NCCL_KNOBS, Knobs
from dynamiccl.system.nccl import TUNER_PLUGIN_ENV

CONTROL_SYMBOLS = plugin.RUNTIME_FUNCTIONS
_HASH_LEN = 129


class PluginControlError(RuntimeError):
    """The plugin cannot be controlled: missing, too old, or it refused an input."""


@dataclass(frozen=True)
class Pin:
    """One pinned choice: ``collective`` (NCCL's id) calls of [min_bytes, max_bytes) run
    ``knobs`` (each knob None: NCCL's own value); ``knobs`` None gives the range back to the
    policy."""

    collective: int
    min_bytes: int
    max_bytes: int
    knobs: Knobs | None


@dataclass(frozen=True)
class PinCounts:
    """Calls a pin covered: ``forced`` ran the pinned choice, ``refused`` NCCL's own (the cell was
    disabled in its cost table)."""

    forced: int = 0
    refused: int = 0

    def __sub__(self, earlier: PinCounts) -> PinCounts:
        return PinCounts(self.forced - earlier.forced, self.refused - earlier.refused)


def library_to_control() -> Path:
    """The library NCCL loads: ``NCCL_TUNER_PLUGIN`` when it names a file, else the package's build."""
    named = os.environ.get(TUNER_PLUGIN_ENV, "")
    if named and Path(named).is_file():
        return Path(named)
    return plugin.library_path(build_if_missing=False)


class PluginControl:
    """ctypes handle on the plugin's control functions."""

    def __init__(self, library: Path | None = None) -> None:
        try:
            path = library or library_to_control()
        except plugin.PluginError as exc:
            raise PluginControlError(str(exc)) from None
        self.path = Path(path)
        lib = ctypes.CDLL(str(self.path))
        missing = [s for s in CONTROL_SYMBOLS if not hasattr(lib, s)]
        if missing:
            raise PluginControlError(
                f"{self.path} does not export {', '.join(missing)}: it predates the run-time controls; "
                "rebuild it (`dynamiccl plugin build`) or point NCCL_TUNER_PLUGIN at a current build")
        lib.dynamiccl_set_context.argtypes = [ctypes.c_char_p]
        lib.dynamiccl_set_context.restype = ctypes.c_int
        lib.dynamiccl_policy_hash.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.dynamiccl_policy_hash.restype = ctypes.c_int
        lib.dynamiccl_plugin_version.argtypes = []
        lib.dynamiccl_plugin_version.restype = ctypes.c_char_p
        lib.dynamiccl_pin_knobs.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                                            ctypes.POINTER(ctypes.c_longlong), ctypes.c_int]
        lib.dynamiccl_pin_knobs.restype = ctypes.c_int
        lib.dynamiccl_pin_counts.argtypes = [ctypes.POINTER(ctypes.c_uint64)] * 2
        lib.dynamiccl_pin_counts.restype = ctypes.c_int
        self._lib = lib

    def set_context(self, straggler: str, c2c: str) -> bool:
        """Makes ``straggler=… c2c=…`` the active slice; False when the policy has no such slice
        (the plugin keeps the current one)."""
        code = self._lib.dynamiccl_set_context(f"straggler={straggler} c2c={c2c}".encode())
        if code < 0:
            raise PluginControlError(f"the plugin rejected the context straggler={straggler} c2c={c2c}")
        return code == 0

    def policy_hash(self) -> str | None:
        """The loaded policy's content hash, None when the plugin has not loaded one."""
        out = ctypes.create_string_buffer(_HASH_LEN)
        return out.value.decode() if self._lib.dynamiccl_policy_hash(out, _HASH_LEN) == 0 else None

    def version(self) -> str:
        raw = self._lib.dynamiccl_plugin_version()
        return raw.decode() if raw else "unknown"

    def pin(self, p: Pin) -> None:
        values = None if p.knobs is None else (ctypes.c_longlong * len(NCCL_KNOBS))(*p.knobs.ids())
        if self._lib.dynamiccl_pin_knobs(p.collective, p.min_bytes, p.max_bytes, values,
                                         len(NCCL_KNOBS)) != 0:
            raise PluginControlError(f"the plugin rejected the pin {p}")

    def pin_counts(self) -> PinCounts:
        """How many calls a pin covered so far in this process: forced, and left to NCCL because
        its cost table had the pinned choice disabled; a call NCCL did not ask the plugin about
        (one rank, NCCL_ALGO/NCCL_PROTO set, no NCCL at all) counts in neither."""
        forced, refused = ctypes.c_uint64(0), ctypes.c_uint64(0)
        self._lib.dynamiccl_pin_counts(ctypes.byref(forced), ctypes.byref(refused))
        return PinCounts(forced.value, refused.value)

    def unpin(self, collective: int, min_bytes: int, max_bytes: int) -> None:
        """Gives [min_bytes, max_bytes) of ``collective`` back to the policy."""
        self.pin(Pin(collective, min_bytes, max_bytes, None))
