"""Building the plugin (cc and CMake), what it exports, and `dynamiccl plugin path|build`."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from dynamiccl import plugin
from dynamiccl.cli.main import main

#: NCCL's struct sizes (nccl_abi.md §1.3): name + 3 function pointers, v6 one more.
STRUCT_BYTES = {"ncclTunerPlugin_v2": 32, "ncclTunerPlugin_v3": 32, "ncclTunerPlugin_v4": 32,
                "ncclTunerPlugin_v5": 32, "ncclTunerPlugin_v6": 40}


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return plugin.build(cache=tmp_path_factory.getbasetemp() / "dynamiccl-c-builds")


def test_exports_exactly_the_tuner_structs_with_nccl_sizes(library):
    assert plugin.exported_symbols(library) == STRUCT_BYTES


def test_structs_as_ctypes_sees_them(library):
    lib = ctypes.CDLL(str(library), mode=os.RTLD_NOW | os.RTLD_LOCAL)

    class TunerV6(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p)] + [(f, ctypes.c_void_p) for f in
                                                  ("init", "getCollInfo", "finalize",
                                                   "getChunkSize")]

    v6 = TunerV6.in_dll(lib, "ncclTunerPlugin_v6")
    assert v6.name == b"DynamICCL"
    assert all((v6.init, v6.getCollInfo, v6.finalize, v6.getChunkSize))
    with pytest.raises(AttributeError):  # implementation functions stay hidden
        lib.dccl_policy_parse  # noqa: B018


@pytest.mark.slow
def test_cmake_build_installs_into_the_package_layout(tmp_path):
    """The same CMakeLists scikit-build-core runs at `pip install`."""
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed")
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    for cmd in (["cmake", "-S", plugin.source_dir(), "-B", build, f"-DCMAKE_INSTALL_PREFIX={prefix}"],
                ["cmake", "--build", build], ["cmake", "--install", build]):
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "warning" not in proc.stdout.lower() + proc.stderr.lower()
    installed = prefix / "dynamiccl" / "lib" / plugin.LIBRARY_NAME
    assert plugin.exported_symbols(installed) == STRUCT_BYTES


def test_cli_build_and_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(plugin.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(plugin, "packaged_library", lambda: None)
    assert main(["plugin", "build"]) == 0
    built = capsys.readouterr().out.strip()
    assert built.startswith(str(tmp_path)) and built.endswith(plugin.LIBRARY_NAME)
    assert main(["plugin", "path"]) == 0
    assert capsys.readouterr().out.strip() == built


def test_path_prefers_a_current_packaged_build_and_replaces_a_stale_one(tmp_path, monkeypatch,
                                                                         library):
    monkeypatch.setenv(plugin.CACHE_ENV, str(tmp_path / "cache"))
    packaged = tmp_path / "site" / plugin.LIBRARY_NAME
    packaged.parent.mkdir()
    shutil.copy(library, packaged)
    monkeypatch.setattr(plugin, "packaged_library", lambda: packaged)
    assert plugin.library_path() == packaged
    os.utime(packaged, (1, 1))  # older than the C sources: an editable install not rebuilt
    rebuilt = plugin.library_path()
    assert rebuilt != packaged and rebuilt.is_relative_to(tmp_path / "cache")


def test_missing_compiler_is_one_clear_error(capsys):
    assert main(["plugin", "build", "--cc", "no-such-cc"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no-such-cc" in err and "\n" not in err
