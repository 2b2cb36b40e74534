"""Hyperparameter sweep on Ray Tune: ``python experiments/sweep.py [hparams_search=NAME] [key=value]``.

The same Hydra app as ``dynamiccl sweep``; see ``configs/sweep.yaml`` and ``configs/hparams_search/``.
"""

from dynamiccl.agents.sweep import main

if __name__ == "__main__":
    main()
