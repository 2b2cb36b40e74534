"""The core install (``pip install dynamiccl``, no extras): the plugin and ``tune``, ``show``,
``export``, ``check-model`` and ``calibrate`` work without torch, Ray, wandb, SB3, gymnasium, Hydra,
matplotlib, tqdm or SciPy (the calibration's solver is on NumPy alone), and a command that needs
one of them says which extra installs it, in one line, exit code 2.

Each command runs in a fresh interpreter in which those libraries cannot be imported: an import hook
raises the ModuleNotFoundError a core install raises, whether or not the library is installed here,
and the run reports what it had imported. ``experiments/bench_install.py`` makes the real core
install in a throwaway venv and measures its size and time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from importlib.metadata import requires
from pathlib import Path

import pytest

from dynamiccl.cli.extras import OPTIONAL_MODULES, extra_for, extra_requirements, installed_by

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "fixtures" / "real"
#: What the core install does not have (import names).
ABSENT = sorted(OPTIONAL_MODULES)

_PROGRAM = textwrap.dedent("""
    import importlib.abc, json, sys
    ABSENT = set(json.loads(sys.argv[1]))
    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ABSENT:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Absent())
    from dynamiccl.cli.main import main
    rc = main(json.loads(sys.argv[2]))
    loaded = sorted({m.split(".")[0] for m in sys.modules} & ABSENT)
    print(json.dumps({"rc": rc, "loaded": loaded}), file=sys.stderr)
""")


def _core(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr without the report line) of ``dynamiccl ARGV`` on a core install;
    asserts that none of the absent libraries was imported."""
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, json.dumps(ABSENT), json.dumps(argv)],
                          capture_output=True, text=True, cwd=cwd, timeout=600)
    *err, report = proc.stderr.strip().splitlines() or [""]
    result = json.loads(report)
    assert result["loaded"] == [], f"dynamiccl {argv[0]} imported {result['loaded']}"
    return result["rc"], proc.stdout, "\n".join(err)


@pytest.mark.slow
def test_tune_on_the_8xh100_fixture_then_show_and_export_need_no_extra(tmp_path):
    rc, out, err = _core(["tune", "--topology", "dgx_h100", "--nodes", "1", "--measurements",
                          str(REAL / "h100_nvswitch_node"), "-o", "tuned.dccl"], tmp_path)
    assert rc == 0, err
    assert "wrote tuned.dccl" in out or "wrote tuned.dccl" in err
    rc, out, err = _core(["show", "tuned.dccl"], tmp_path)
    assert rc == 0 and "checksum OK" in out, err
    rc, out, err = _core(["export", "--policy", "oracle", "--topology", "dgx_h100", "--nodes", "2",
                          "-o", "exported.dccl"], tmp_path)
    assert rc == 0 and (tmp_path / "exported.dccl").is_file(), err


@pytest.mark.slow
def test_calibrate_fits_real_logs_without_scipy(tmp_path):
    """The calibration (which tune runs too) fits with the core's own solver: SciPy is among the
    libraries the core install lacks, and it is never imported."""
    assert "scipy" in ABSENT
    system = REAL / "sophia_dgx_a100_ib"
    rc, out, err = _core(["calibrate", str(system / "all_reduce_n2.txt"), str(system / "all_gather_n2.txt"),
                          "--topology", str(system / "topology.yaml"), "--keep-undetermined",
                          "-o", "fitted.yaml", "--json"], tmp_path)
    assert rc == 0, err
    report = json.loads(out)
    assert report["rms_log_error"]["fitted"] < 0.15 < report["rms_log_error"]["base"]
    assert (tmp_path / "fitted.yaml").is_file()


def test_check_model_and_the_plugin_need_no_extra(tmp_path):
    rc, out, err = _core(["check-model", str(REAL / "nccl_debug" / "rtx5090_socket_broadcast_tuning.log"),
                          "--topology", str(REAL / "rtx5090_socket_2ranks" / "topology.yaml")], tmp_path)
    assert rc == 0, err
    rc, out, err = _core(["plugin", "path"], tmp_path)
    assert rc == 0 and out.strip().endswith("libnccl-tuner-dynamiccl.so"), err
    rc, out, _ = _core(["--help"], tmp_path)
    assert rc == 0 and "tune" in out


@pytest.mark.parametrize("argv, extra", [
    (["train", "experiment=quickstart"], "train"),
    (["sweep"], "sweep"),
    (["evaluate", "--policy", "oracle", "--suite", "heldout"], "train"),
    (["profile", "collective", "--backend", "gloo", "--nprocs", "2", "--collective", "allreduce",
      "--size", "1MB"], "runtime"),
    (["explain", "--topology", "dgx_h100", "--nodes", "2", "--collective", "allreduce", "--plot",
      "sweep.png"], "plots"),
])
def test_a_command_that_needs_an_extra_names_it_in_one_line(tmp_path, argv, extra):
    rc, out, err = _core(argv, tmp_path)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"dynamiccl {argv[0]}") and f"pip install 'dynamiccl[{extra}]'" in err
    assert not any(tmp_path.iterdir()), "a refused command wrote nothing"


def test_the_core_requirements_hold_none_of_the_extras_libraries():
    core = {re.match(r"[A-Za-z0-9._-]+", line).group(0).lower() for line in requires("dynamiccl")
            if "extra ==" not in line}
    assert core == {"numpy", "pyyaml", "rich", "nvidia-ml-py"}
    for module, distribution in OPTIONAL_MODULES.items():  # each has an extra to name
        assert extra_for(distribution) is not None, module


def test_the_test_extra_installs_every_extra():
    extras = extra_requirements()
    assert set(extras) == {"runtime", "plots", "train", "sweep", "all", "test"}
    everything = set().union(*(installed_by(name, extras) for name in extras if name != "test"))
    assert everything <= installed_by("test", extras)
    assert installed_by("runtime", extras) == {"torch"} and installed_by("plots", extras) == {"matplotlib"}
