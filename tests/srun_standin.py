"""A stand-in for Slurm's ``srun`` (no Slurm runs here), for the tests of how a stop reaches the
ranks of a launch under Slurm.

:data:`SRUN` behaves as srun(1) says (SIGNALS AND ESCAPE SEQUENCES): one Ctrl-C (SIGINT) only
reports the tasks' state and the step goes on; SIGTERM and SIGHUP are passed on to the tasks. The
task runs here, in the background of the script.
"""

from __future__ import annotations

from pathlib import Path

SRUN = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done
"$@" &
task=$!
trap 'echo "srun: interrupt (one more within 1 sec to abort)" >&2' INT
trap 'kill -TERM $task' TERM HUP
while :; do wait $task; status=$?; kill -0 $task 2>/dev/null || break; done
exit $status
"""


def install_srun(folder: Path) -> Path:
    """``folder/srun`` as :data:`SRUN`, executable; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    srun = folder / "srun"
    srun.write_text(SRUN)
    srun.chmod(0o755)
    return srun
