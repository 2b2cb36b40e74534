"""Size and time of the core install (``pip install dynamiccl``, no extras) from a warm pip cache.

Builds this checkout's wheel once (as a package index would serve it), installs it with the pins
into a throwaway venv to warm pip's cache (the only step that downloads), then times ``pip install``
of it into ``--reps`` fresh venvs. Reports the median install time, the disk the install adds to an
empty venv (site-packages growth, MB = 10^6 bytes), that growth per distribution, and whether
``dynamiccl tune`` on the 8xH100 fixture (tests/fixtures/real/h100_nvswitch_node) works in the
install. Goals: <= 100 MB and <= 30 s (issue 41).

    python experiments/bench_install.py [--reps 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO / ".ci" / "constraints.txt"
FIXTURE = REPO / "tests" / "fixtures" / "real" / "h100_nvswitch_node"
GOAL_MB, GOAL_S = 100.0, 30.0

#: Run inside the venv: the bytes of each installed distribution's files.
_SIZES = """
import json, sys
from importlib.metadata import distributions
sizes = {}
for dist in distributions():
    total = 0
    for f in dist.files or ():
        path = dist.locate_file(f)
        total += path.stat().st_size if path.is_file() else 0
    sizes[dist.metadata["Name"]] = total
print(json.dumps(sizes))
"""


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _fresh_venv(path: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a new venv with pip."""
    venv.create(path, with_pip=True)
    python = path / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                .stdout.strip())
    return python, site


def _install(python: Path, wheel: Path) -> float:
    t0 = time.perf_counter()
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", CONSTRAINTS,
          wheel])
    return time.perf_counter() - t0


def measure(reps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="dynamiccl-install-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
              "-w", tmp / "wheel", REPO])
        build_s = time.perf_counter() - t0
        [wheel] = (tmp / "wheel").glob("dynamiccl-*.whl")
        warm_python, _ = _fresh_venv(tmp / "warm-up")
        warmup_s = _install(warm_python, wheel)  # downloads what the cache lacks
        times, growth, sizes, tune = [], 0, {}, {}
        for rep in range(reps):
            python, site = _fresh_venv(tmp / f"venv{rep}")
            empty = _folder_bytes(site)
            times.append(_install(python, wheel))
            if rep == 0:
                growth = _folder_bytes(site) - empty
                sizes = json.loads(_run([python, "-c", _SIZES]).stdout)
                t0 = time.perf_counter()
                proc = subprocess.run([python.parent / "dynamiccl", "tune", "--topology", "dgx_h100",
                                       "--nodes", "1", "--measurements", FIXTURE, "-o",
                                       tmp / "tuned.dccl"], capture_output=True, text=True)
                tune = {"rc": proc.returncode, "s": round(time.perf_counter() - t0, 1),
                        "wrote": (tmp / "tuned.dccl").is_file(),
                        "stderr_tail": proc.stderr.strip().splitlines()[-1:]}
        base = {"pip", "setuptools", "wheel"}
        packages = {name: round(b / 1e6, 1) for name, b in sorted(sizes.items(), key=lambda kv: -kv[1])
                    if name.lower() not in base}
        install_s = statistics.median(times)
        installed_mb = growth / 1e6
        return {"python": sys.version.split()[0], "wheel": wheel.name,
                "wheel_build_s": round(build_s, 1), "warmup_install_s": round(warmup_s, 1),
                "install_s": [round(t, 1) for t in times], "install_s_median": round(install_s, 1),
                "installed_mb": round(installed_mb, 1), "packages_mb": packages,
                "tune_on_h100_fixture": tune,
                "goals": {"installed_mb": GOAL_MB, "install_s": GOAL_S},
                "meets": {"installed_mb": installed_mb <= GOAL_MB, "install_s": install_s <= GOAL_S,
                          "tune": tune.get("rc") == 0 and tune.get("wrote", False)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh venvs timed (median reported)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    result = measure(args.reps)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"core install of {result['wheel']} (Python {result['python']}), from a warm pip cache:")
    print(f"  time  {result['install_s_median']:.1f} s median of {result['install_s']} "
          f"(goal <= {GOAL_S:.0f} s: {'met' if result['meets']['install_s'] else 'MISSED'})")
    print(f"  disk  {result['installed_mb']:.1f} MB added to an empty venv "
          f"(goal <= {GOAL_MB:.0f} MB: {'met' if result['meets']['installed_mb'] else 'MISSED'})")
    for name, mb in result["packages_mb"].items():
        print(f"        {mb:7.1f} MB  {name}")
    tune = result["tune_on_h100_fixture"]
    print(f"  dynamiccl tune on the 8xH100 fixture: exit {tune['rc']} in {tune['s']} s"
          f"{'' if tune['rc'] == 0 else ': ' + ' '.join(tune['stderr_tail'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
