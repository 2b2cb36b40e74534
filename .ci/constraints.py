#!/usr/bin/env python3
"""The pinned install (.ci/constraints.txt): check that it still resolves, or refresh it.

``check`` asks pip what a fresh install with the pins would install (``pip install --dry-run
-c .ci/constraints.txt -e ".[test]"`` in a throwaway venv, nothing is installed; ``[test]`` names
every other extra, so this is the core and every extra at once, and any smaller install, the core
or one extra, takes a subset of the same pins) and fails, naming
the packages, when the pins no longer resolve (a release pulled from the index, a bound in
pyproject.toml the pins break) or when the install would take a package the file does not pin (a
new dependency), so a fresh machine always gets exactly what CI tested.
``refresh`` resolves the newest releases pyproject.toml allows, the same way but without the pins,
and rewrites the file with them (its comment header kept); run the suite before committing it.
It runs the pip of a throwaway venv (``--report`` needs pip >= 22.2, which Python 3.11's venv has);
pip downloads metadata only, no wheels it can avoid. Offline (the index does not answer), both say
so and that nothing was checked, rather than that the pins no longer resolve.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO / ".ci" / "constraints.txt"
PROJECT = "dynamiccl"


def normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    """``name == version`` per line of the constraints file, keyed by normalized name."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[normalized(name)] = version.strip()
    return pins


def resolve(pinned: bool) -> dict[str, tuple[str, str]]:
    """What ``pip install -e ".[test]"`` would install on a fresh machine (normalized name ->
    (name, version)), without installing anything: the pip of a throwaway venv, as the README's
    commands get (a system Python may have none); exits 1 with pip's message when it cannot."""
    with tempfile.TemporaryDirectory() as tmp:
        venv.create(Path(tmp) / "venv", with_pip=True)
        report = Path(tmp) / "report.json"
        cmd = [str(Path(tmp) / "venv" / "bin" / "python"), "-m", "pip", "install", "--dry-run",
               "--report", str(report), *(["-c", str(CONSTRAINTS)] if pinned else []), "-e", ".[test]"]
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        offline = unreachable_index(out.stdout + out.stderr) if out.returncode else None
        if offline:
            sys.exit(f"{CONSTRAINTS.name}: not checked: pip cannot reach the package index "
                     f"({offline}); connect to the network (or set PIP_INDEX_URL to a mirror, or a "
                     "proxy) and run it again")
        if out.returncode != 0:
            sys.exit(f"{CONSTRAINTS.name}: pip cannot resolve the install"
                     f"{' with these pins' if pinned else ''}:\n{_conflict(out.stdout + out.stderr)}\n"
                     "refresh the pins with `python3 .ci/constraints.py refresh`")
        installs = json.loads(report.read_text())["install"]
    found = {normalized(item["metadata"]["name"]): (item["metadata"]["name"], item["metadata"]["version"])
             for item in installs}
    found.pop(PROJECT, None)
    return found


#: The index pip asks when none is configured.
DEFAULT_INDEX = "https://pypi.org/simple"


def unreachable_index(log: str) -> str | None:
    """Why pip's index cannot be reached (the first index its log names, else PyPI), or None when
    it answers: offline, pip finds no version of anything ("from versions: none"), which reads as
    pins that no longer resolve but says nothing of them."""
    named = re.findall(r"Looking in indexes: (.+)", log)
    urls = [u.strip() for u in named[0].split(",")] if named else [DEFAULT_INDEX]
    why = ""
    for url in map(_without_password, urls):  # pip's log hides a password as ****: ask without
        try:
            urllib.request.urlopen(url.rstrip("/") + "/pip/", timeout=15).close()
            return None
        except urllib.error.HTTPError:
            return None  # it answered (an index may hold no pip)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            why = why or f"{url}: {reason}"
    return why


def _without_password(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _conflict(log: str) -> str:
    """pip's explanation of a failed resolution (its log from the conflict on), else its tail."""
    start = log.find("The conflict is caused by")
    return (log[start:] if start >= 0 else log[-3000:]).strip()


def check() -> None:
    pins = read_pins()
    resolved = resolve(pinned=True)
    unpinned = sorted(f"{name}=={version}" for key, (name, version) in resolved.items() if key not in pins)
    if unpinned:
        sys.exit(f"{CONSTRAINTS.name}: a fresh install would take packages the file does not pin: "
                 f"{', '.join(unpinned)}; refresh the pins with `python3 .ci/constraints.py refresh`")
    print(f"{CONSTRAINTS.name}: resolves; a fresh install takes exactly the {len(resolved)} pinned "
          f"packages ({len(pins) - len(resolved)} pins unused)")


def refresh() -> None:
    header = [line for line in CONSTRAINTS.read_text().splitlines() if line.startswith("#")]
    resolved = resolve(pinned=False)
    pins = [f"{name}=={version}" for _, (name, version) in sorted(resolved.items())]
    tmp = CONSTRAINTS.with_name(CONSTRAINTS.name + ".tmp")
    tmp.write_text("\n".join([*header, *pins]) + "\n")
    os.replace(tmp, CONSTRAINTS)  # atomically: an interrupted refresh leaves the old pins
    print(f"{CONSTRAINTS.name}: {len(pins)} packages pinned; run the suite (.ci/run) before committing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("action", choices=["check", "refresh"],
                        help="check: the pins resolve and cover the install; refresh: rewrite them")
    {"check": check, "refresh": refresh}[parser.parse_args().action]()


if __name__ == "__main__":
    main()
