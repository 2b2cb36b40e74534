"""A job that ignores SIGINT, SIGTERM and SIGHUP and leaves a child that does too (a launcher whose
ranks outlive it): only SIGKILL of every process of the job ends it, as ``ab run`` must. The job
prints a score line, its child says when it is ready; both then sleep a minute.

Used by ``tests/test_ab.py`` and copied beside the cases of ``experiments/hostile_inputs.py``.
"""

import signal
import subprocess
import sys
import time

for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
if sys.argv[1:] != ["child"]:
    subprocess.Popen([sys.executable, __file__, "child"])
    print("step time 10 ms", flush=True)
else:
    print("child ready", flush=True)
time.sleep(60)
