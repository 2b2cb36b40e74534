"""The C tests' sanitizer builds (shared by the tuner's and the profiler's tests): the flags, and
whether ThreadSanitizer and clang's libFuzzer can run here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from dynamiccl.plugin import build as plugin

ASAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
        "-g", "-O1"]
TSAN = ["-fsanitize=thread", "-g", "-O1"]


def clang_fuzzer() -> str | None:
    """clang, where it can build a libFuzzer target."""
    clang = shutil.which("clang")
    if not clang:
        return None
    probe = subprocess.run([clang, "-fsanitize=fuzzer", "-x", "c", "-", "-o", os.devnull],
                           input="int LLVMFuzzerTestOneInput(const char*d,unsigned long n)"
                                 "{return 0;}", capture_output=True, text=True)
    return clang if probe.returncode == 0 else None


def tsan_works(cache: Path) -> bool:
    """A ThreadSanitizer build runs on this kernel and compiler."""
    probe = cache / "tsan_probe.c"
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text("int main(void){return 0;}\n")
    try:
        exe = plugin.compile_c([probe], "tsan_probe", flags=TSAN, cache=cache)
    except plugin.PluginError:
        return False
    return subprocess.run([str(exe)], capture_output=True).returncode == 0
