"""Score policies on a suite: ``python experiments/evaluate.py --policy oracle --suite heldout``.

The same command as ``dynamiccl evaluate`` (``--help`` lists the options).
"""

import sys

from dynamiccl.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
