"""Train a tuning policy: ``python experiments/train.py [experiment=NAME] [key=value ...]``.

The same Hydra app as ``dynamiccl train``; see ``configs/train.yaml`` for every key.
"""

from dynamiccl.agents.train import main

if __name__ == "__main__":
    main()
