"""Training: the Hydra pipeline that trains every learner, then scores and ships what it trained.

Imports policies and shipping; of the installed code only the CLI imports it.

* :mod:`.train` / :mod:`.sweep` – the Hydra apps (``dynamiccl train``: exact resume after a kill;
  ``dynamiccl sweep``: Ray Tune), built on :mod:`.config_checks` (what the configs' schema,
  :mod:`dynamiccl.configs.schema`, cannot express), :mod:`.run_folder` (lock, recorded settings),
  :mod:`.envs_factory` (the training environment), :mod:`.callbacks` (rollout-aligned checkpoints,
  evaluations, Ctrl-C), :mod:`.resume_state` (environment streams and generators in a checkpoint),
  :mod:`.logging` (wandb, offline by default) and :mod:`.training_plots`;
* the learners that train in rounds: :mod:`.full_info_agent` (the full-information learner in the
  pipeline), :mod:`.prior_learner` and :mod:`.prior_agent` (the learned prior), :mod:`.evidence_learner` and
  :mod:`.evidence_agent` (the evidence tuner), sharing :mod:`.round_agent` (config, build,
  checkpoints, training command) and :mod:`.round_checkpoints`.
"""
