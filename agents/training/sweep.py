"""Hyperparameter sweeps on Ray Tune, described in Hydra: ``python experiments/sweep.py
hparams_search=maskable_ppo``.

Hydra composes the base config in the driver and resolves it (``${hydra:…}`` cannot resolve inside
Ray workers); the search space is the ``tune.search_space`` mapping of dotted config keys to
instantiable Tune domains (``_target_: ray.tune.loguniform``). Each trial applies its sample to the
base config and runs :func:`dynamiccl.agents.training.train.train` in its own trial folder, reporting every
periodic evaluation (with a checkpoint) to Tune, so a scheduler (``tune.scheduler``, e.g. ASHA) can
stop a trial early, and an interrupted sweep restarted in the same folder resumes: finished trials
are kept and unfinished ones continue from their last checkpoint. The sweep's settings are fixed
when it starts (a restore with another ``tune.num_samples`` is refused). Trials log to wandb
(offline by default, grouped under ``tune.name``) through the ``WANDB_MODE`` environment variable,
which Ray passes on to its workers.

Ray is local by default (``ray.init(num_cpus=2, include_dashboard=False)``); ``ray.address=auto``
or ``ray.address=ray://head:10001`` runs the trials on a cluster.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from dynamiccl.agents.training.config_checks import ConfigCheckError, validate
from dynamiccl.agents.training.run_folder import check_run_folder, locked
from dynamiccl.config_loader import ConfigError, read_config


def search_space(cfg: DictConfig) -> dict[str, Any]:
    """Dotted key -> Tune domain; a key that is not in the base config is refused by name."""
    space = {}
    for key, spec in cfg.tune.search_space.items():
        if OmegaConf.select(cfg, str(key), default="__missing__") == "__missing__":
            raise ConfigCheckError(f"tune.search_space key '{key}' is not a key of the config; "
                                   "use a dotted path such as agent.model.learning_rate")
        is_domain = isinstance(spec, DictConfig) and "_target_" in spec
        space[str(key)] = hydra.utils.instantiate(spec) if is_domain else spec
    if not space:
        raise ConfigCheckError("the search space is empty: choose one with hparams_search=NAME "
                               "(configs/hparams_search/)")
    return space


def check_restore(cfg: DictConfig, out_dir: Path) -> None:
    """Ray Tune restores a sweep with the size it started with: a different ``tune.num_samples``
    is refused rather than ignored (``sweep.yaml`` records the settings at the start)."""
    recorded = out_dir / "sweep.yaml"
    settings = {"num_samples": int(cfg.tune.num_samples), "metric": str(cfg.tune.metric),
                "mode": str(cfg.tune.mode), "search_space": list(cfg.tune.search_space)}
    if not recorded.is_file():
        from dynamiccl.files import write_text_atomic

        write_text_atomic(recorded, OmegaConf.to_yaml(OmegaConf.create(settings)))
        return
    try:
        before, _ = read_config("sweep", recorded)
    except ConfigError as exc:
        raise ConfigCheckError(f"{exc}; it holds the settings the sweep in {out_dir} was started "
                               "with: restore it, or start a new sweep in a new folder "
                               "(hydra.run.dir=PATH)") from None
    changed = [f"tune.{k} ({before.get(k)!r} -> {v!r})" for k, v in settings.items()
               if before.get(k) != v]
    if changed:
        raise ConfigCheckError(f"{out_dir} holds a sweep started with other settings: "
                               f"{', '.join(changed)}; Ray Tune cannot change them on restore. Run "
                               "it with the same settings, or start a new sweep in a new folder "
                               "(hydra.run.dir=PATH)")


def _trial(params: dict[str, Any], base_cfg: dict[str, Any], experiment: str) -> None:
    """One Tune trial: the sampled config trained in the trial's folder of ``experiment`` (the
    sweep's results), resuming when Tune restores.

    The run folder is written there directly, not into the trial folder Tune hands the trial (Ray's
    staging copy of the experiment, on the driver's machine): Ray uploads that copy, whole, with the
    experiment's state every few seconds, while the trial writes into it and atomically replaces
    files (a checkpoint, a plot); an upload that has listed a file the trial then renames fails
    ("Saving experiment state ... failed"), the more often the slower a loaded machine copies.
    """
    from ray import tune

    from dynamiccl.agents.training.train import train

    cfg = OmegaConf.create(base_cfg)
    for key, value in params.items():
        OmegaConf.update(cfg, key, value, merge=False)
    cfg.trainer.progress_bar = False
    if cfg.logger.get("group", "absent") is None:
        cfg.logger.group = cfg.tune.name  # the sweep's trials side by side in wandb
    run_dir = Path(experiment) / Path(tune.get_context().get_trial_dir()).name / "run"
    restored = tune.get_checkpoint()
    # Tune's copy matters where the trial folder did not survive (another node); a local trial
    # folder holds a checkpoint at least as recent.
    if restored is not None and not (run_dir / "checkpoints" / "last.zip").is_file():
        with restored.as_directory() as folder:
            shutil.copytree(folder, run_dir / "checkpoints", dirs_exist_ok=True)

    def report(metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        clean = {k: (float("nan") if v is None else v) for k, v in metrics.items()}
        checkpoint = tune.Checkpoint.from_directory(str(checkpoint_dir)) if checkpoint_dir else None
        tune.report(clean, checkpoint=checkpoint)

    train(cfg, run_dir, report=report)


def _init_ray(cfg: DictConfig, env_vars: dict[str, str]) -> bool:
    """Starts (or joins) Ray; returns whether we started it and so must shut it down."""
    import ray

    if ray.is_initialized():
        return False
    runtime_env = {"env_vars": env_vars}
    if cfg.ray.address:
        ray.init(address=str(cfg.ray.address), runtime_env=runtime_env)
    else:
        ray.init(num_cpus=int(cfg.ray.num_cpus), include_dashboard=bool(cfg.ray.include_dashboard),
                 runtime_env=runtime_env, log_to_driver=False)
    return True


def _wandb_env(cfg: DictConfig) -> dict[str, str]:
    """Variables trials need: wandb's mode must come from the environment inside Ray workers."""
    env = {"RAY_CHDIR_TO_TRIAL_DIR": "0"}
    mode = OmegaConf.select(cfg, "logger.mode")
    if mode:
        os.environ.setdefault("WANDB_MODE", str(mode))
    for key in ("WANDB_MODE", "WANDB_DIR", "WANDB_SILENT", "WANDB_PROJECT"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def run_sweep(cfg: DictConfig, out_dir: str | Path) -> list[dict[str, Any]]:
    """Runs (or resumes) the sweep; writes ``results.csv``/``results.json`` and the plot, and
    prints the table."""
    validate(cfg, sweep=True)
    space = search_space(cfg)
    with locked(Path(out_dir).resolve()) as folder:
        check_run_folder(folder, "sweep.yaml", "sweep")
        check_restore(cfg, folder)
        grid = _fit(cfg, space, folder)
    metric = str(cfg.tune.metric)
    rows = results_rows(grid, list(space), metric)
    rank_rows(rows, metric, str(cfg.tune.mode))
    write_results(rows, folder)
    from dynamiccl.agents.training.training_plots import plot_sweep

    plot_sweep(rows, list(space), metric, str(cfg.agent.name), folder)
    print_results(rows, metric)
    return rows


def _fit(cfg: DictConfig, space: dict[str, Any], folder: Path) -> Any:
    from ray import tune

    base = OmegaConf.to_container(cfg, resolve=True)
    storage = folder / "ray_results"
    experiment = storage / str(cfg.tune.name)
    trainable = tune.with_resources(tune.with_parameters(_trial, base_cfg=base, experiment=str(experiment)),
                                    {"cpu": 1})
    started = _init_ray(cfg, _wandb_env(cfg))
    try:
        if tune.Tuner.can_restore(str(experiment)):
            print(f"[dynamiccl sweep] resuming {experiment}", flush=True)
            tuner = tune.Tuner.restore(str(experiment), trainable, resume_errored=True,
                                       param_space=space)
        else:
            scheduler = cfg.tune.scheduler
            tuner = tune.Tuner(
                trainable,
                param_space=space,
                tune_config=tune.TuneConfig(
                    metric=str(cfg.tune.metric), mode=str(cfg.tune.mode),
                    num_samples=int(cfg.tune.num_samples),
                    max_concurrent_trials=int(cfg.tune.max_concurrent_trials),
                    scheduler=hydra.utils.instantiate(scheduler) if scheduler else None),
                run_config=tune.RunConfig(
                    name=str(cfg.tune.name), storage_path=str(storage), verbose=0,
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
            )
        return tuner.fit()
    finally:
        if started:
            import ray

            ray.shutdown()


def rank_rows(rows: list[dict[str, Any]], metric: str, mode: str) -> None:
    """Best ``metric`` first, trials without one last; ties by trial id, so a resumed sweep lists its
    trials in the order the first run did (Ray returns them in the order they last reported)."""

    def key(row: dict[str, Any]) -> tuple[float, str]:
        value = row.get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return math.inf, str(row.get("trial", ""))
        return (-value if mode == "max" else value), str(row.get("trial", ""))

    rows.sort(key=key)


def results_rows(grid: Any, keys: list[str], metric: str) -> list[dict[str, Any]]:
    rows = []
    for result in grid:
        metrics = result.metrics or {}
        # Only the final report of a finished training carries train_seconds.
        status = "ERROR" if result.error else "OK" if "train_seconds" in metrics else "STOPPED"
        row: dict[str, Any] = {"trial": metrics.get("trial_id", ""), "status": status}
        row.update({k: (result.config or {}).get(k) for k in keys})
        for name in (metric, "geomean_speedup", "worst_speedup", "step", "train_seconds"):
            value = metrics.get(name)
            row[name] = None if isinstance(value, float) and math.isnan(value) else value
        row["path"] = result.path
        rows.append(row)
    return rows


def write_results(rows: list[dict[str, Any]], out_dir: Path) -> None:
    """``results.json`` and ``results.csv``, each written atomically."""
    import io

    from dynamiccl.files import write_text_atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "results.json", json.dumps(rows, indent=2, default=str))
    if rows:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        write_text_atomic(out_dir / "results.csv", buf.getvalue())


def print_results(rows: list[dict[str, Any]], metric: str) -> None:
    from rich.table import Table

    from dynamiccl.console import console

    table = Table(title=f"sweep results (best {metric} first)")
    columns = [c for c in (rows[0] if rows else {}) if c != "path"]
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in
                        (row[c] for c in columns)))
    console().print(table)


@hydra.main(version_base="1.3", config_path="pkg://dynamiccl.configs", config_name="sweep")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from dynamiccl.agents.training.train import user_errors_exit

    with user_errors_exit("sweep"):
        rows = run_sweep(cfg, HydraConfig.get().runtime.output_dir)
    return rows[0].get(str(cfg.tune.metric)) if rows else None
