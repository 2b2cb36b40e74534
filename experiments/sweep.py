"""Hyperparameter sweep on Ray Tune: ``python experiments/sweep.py [hparams_search=NAME] [key=value]``.

``dynamiccl sweep`` under another name (one-line errors, exit code 2 for a mistake); see
``configs/sweep.yaml`` and ``configs/hparams_search/``.
"""

import sys

from dynamiccl.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))
