"""The schema of the training and sweep configs, registered in Hydra's ConfigStore as
``config_schema`` when this package is imported (``configs/train.yaml`` builds on it).

The dataclasses hold every default of the ``trainer``, ``eval``, ``resume``, ``ray`` and ``tune``
sections (and the keys and types of ``env``, whose values its config group holds), so those
defaults are written once, here, and Hydra itself refuses a misspelt key or a
value of the wrong type while composing. What a type cannot say is checked by
:func:`dynamiccl.agents.training.config_checks.validate` before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class TrainerConfig:
    #: Environment steps to train for; PPO stops at the first whole rollout at or past it.
    total_timesteps: int = 50_000
    #: Parallel environments (SB3 DummyVecEnv); 1 keeps runs reproducible on 2 cores.
    n_envs: int = 1
    #: Steps between checkpoints, taken at the first rollout boundary past each multiple, so a
    #: checkpoint holds exactly the updates of the steps it is labelled with.
    checkpoint_every: int = 10_000
    progress_bar: bool = True
    #: Evaluate on ``eval.suite`` every this many steps during training (0: only at the end); a
    #: sweep reports each evaluation to Ray Tune, so schedulers such as ASHA can stop a trial early.
    eval_every: int = 0
    #: Torch CPU threads; small policy networks run fastest single-threaded on a shared machine.
    torch_threads: int = 1


@dataclass
class EnvConfig:
    """Keyword arguments of ``CollectiveTuningEnv`` (besides ``scenario``, which comes from the
    ``scenario`` group); their values live in ``configs/env/default.yaml``."""

    id: str = MISSING
    #: sim (the simulator), perturbed (a miscalibrated reality), replay or live.
    backend: str = MISSING
    #: Only actions a tuner plugin can make NCCL run; false adds the simulator-only ones.
    deployable: bool = MISSING
    #: ``deployable`` (what the tuner plugin sees per call: what ships) or ``research`` (the
    #: simulator's full state, which export cannot reproduce).
    observation: str = MISSING
    #: Calls per episode; None: the scenario distribution's (one iteration).
    episode_length: int | None = None


@dataclass
class EvalConfig:
    #: Scenario suite of the evaluation (configs/scenario/<name>.yaml).
    suite: str = "heldout"
    #: Baselines evaluated next to the trained agent at the end.
    baselines: list[str] = field(default_factory=lambda: ["nccl_default", "oracle", "static_best",
                                                          "random"])
    plots: bool = True


@dataclass
class ResumeConfig:
    #: A run folder that holds a run resumes it only with the settings it was started with;
    #: true continues with the new settings (recorded in config_from_<step>.yaml).
    allow_changes: bool = False


@dataclass
class RayConfig:
    #: None starts a local Ray; "auto" or "ray://host:10001" joins a cluster.
    address: str | None = None
    num_cpus: int = 2
    include_dashboard: bool = False


@dataclass
class TuneConfig:
    #: Experiment name under the sweep folder, and the wandb group of its trials.
    name: str = "sweep"
    metric: str = "oracle_share"
    mode: str = "max"
    #: Trials to run; fixed when the sweep starts (a restored sweep refuses a different number).
    num_samples: int = 2
    max_concurrent_trials: int = 2
    #: Dotted config key -> instantiable Ray Tune domain (``_target_: ray.tune.loguniform`` ...).
    search_space: dict[str, Any] = field(default_factory=dict)
    #: An instantiable Tune scheduler (e.g. ``_target_: ray.tune.schedulers.ASHAScheduler``).
    scheduler: Any = None


@dataclass
class Config:
    """The whole composed config; the groups (``agent``, ``env``, ...) keep their own YAML."""

    task_name: str = "train"
    tags: list[str] = field(default_factory=list)
    #: Seeds the model, the environments and SB3's global generators.
    seed: int = 0
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    topology: Any = None
    workload: Any = None
    scenario: Any = None
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: Any = None
    logger: Any = None
    #: Where the trained policy is exported after training (``dynamiccl.agents.shipping.deploy`` checks it).
    deploy: Any = None


ConfigStore.instance().store(name="config_schema", node=Config)
