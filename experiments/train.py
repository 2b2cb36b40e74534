"""Train a tuning policy: ``python experiments/train.py [experiment=NAME] [key=value ...]``.

``dynamiccl train`` under another name, so a mistake in an override is the same one line with exit
code 2 and a refused run leaves no folder behind; see ``configs/train.yaml`` for every key.
"""

import sys

from dynamiccl.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
