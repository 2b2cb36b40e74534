"""Run folders, checkpoints and policy files saved by an earlier layout of the code still load, score
as they did and resume to where an uninterrupted run ends (tests/fixtures/old_artifacts, README)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from training_runs import ENV, REPO, checkpoint_steps, run

from dynamiccl.agents.policies.sb3_agents import load_checkpoint
from dynamiccl.agents.training import resume_state, round_checkpoints
from dynamiccl.agents.training.callbacks import parameters_digest

SAVED = REPO / "tests" / "fixtures" / "old_artifacts"
FULL_INFO = ["agent=full_info", "scenario=smoke", "logger=none", "eval.suite=smoke",
             "eval.baselines=[nccl_default]", "eval.plots=false", "trainer.progress_bar=false",
             "agent.model.systems_per_round=4", "agent.model.calls_per_system=64",
             "agent.model.hidden=8", "agent.model.layers=1", "agent.model.ensemble=1",
             "agent.model.epochs_per_round=2", "agent.model.min_gain=0.0"]
#: Each killed run folder: the overrides it was started with, and the step it was killed at.
KILLED = {
    "maskable_ppo_killed": (["experiment=smoke", "agent.model.n_steps=64", "agent.model.batch_size=32",
                             "agent.model.n_epochs=2", "agent.model.policy_kwargs.net_arch=[8]",
                             "trainer.total_timesteps=256", "trainer.checkpoint_every=64",
                             "trainer.progress_bar=false", "eval.baselines=[nccl_default]",
                             "eval.plots=false"], 64, 256),
    "full_info_killed": ([*FULL_INFO, "trainer.total_timesteps=2048", "trainer.checkpoint_every=256"],
                         256, 2048),
    # realities=datasheet: what the prior trained against then, before the key existed (ADDED_KEYS)
    "learned_prior_killed": (["agent=learned_prior", "agent.model.realities=datasheet",
                              "trainer.progress_bar=false", "agent.model.systems_per_round=2",
                              "agent.model.series_per_system=1", "agent.model.budgets_per_series=4",
                              "agent.model.queries_per_budget=16",
                              "agent.model.hidden=8", "agent.model.ensemble=2",
                              "agent.model.validation_systems=3", "logger=none",
                              "trainer.total_timesteps=3000", "trainer.checkpoint_every=300"], 346, 3000),
}


#: What SB3 records of the libraries a checkpoint was saved with (its zip's system_info.txt), which
#: must be installed for a bit-identical continuation to be promised.
VERSIONS = ("Python", "Stable-Baselines3", "PyTorch", "Numpy", "Gymnasium")
#: How near a resumed run ends to the uninterrupted one when the installation does not reproduce the
#: saved first segment exactly: each parameter tensor within this share of its largest entry, and
#: each score within this.
NEAR, NEAR_SCORE = 1e-3, 0.01


def test_the_saved_policies_score_as_they_did_when_saved(tmp_path):
    folder = tmp_path / "saved"
    shutil.copytree(SAVED, folder)
    out = subprocess.run(
        [sys.executable, "-m", "dynamiccl.cli.main", "evaluate", "--policy",
         "maskable_ppo_killed/checkpoints/last.zip,full_info_finished,full_info_killed/checkpoints/last.pt,"
         "oracle_ring_ring_8to1.dccl", "--suite", "smoke", "--json"],
        capture_output=True, text=True, env=ENV, cwd=folder, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    expected = json.loads((SAVED / "expected_scores.json").read_text())
    scored = json.loads(out.stdout)
    assert [row["policy"] for row in scored] == [row["policy"] for row in expected]
    for now, then in zip(scored, expected, strict=True):
        numbers = [k for k, v in then.items() if isinstance(v, float)]
        assert {k: v for k, v in now.items() if k not in numbers} == \
            {k: v for k, v in then.items() if k not in numbers}
        assert [now[k] for k in numbers] == pytest.approx([then[k] for k in numbers], rel=1e-9), \
            now["policy"]


def test_a_saved_sb3_checkpoint_keeps_its_learning_rate_schedule():
    model, meta = load_checkpoint(SAVED / "maskable_ppo_killed" / "checkpoints" / "last.zip")
    assert meta["algo"] == "maskable_ppo" and model.num_timesteps == 64
    assert model.learning_rate(0.5) == pytest.approx(5e-4), "linear_schedule(start=1e-3) at half way"


def _trained(run_dir: Path) -> dict[str, np.ndarray]:
    """The run's final parameters, whichever learner wrote them."""
    if (run_dir / "model.zip").is_file():
        model, _ = load_checkpoint(run_dir / "model.zip")
        return {k: v.numpy() for k, v in model.policy.state_dict().items()}
    blob = torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)
    return {k: v.numpy() for k, v in blob["state"].items()}


@dataclass(frozen=True)
class Resumed:
    """A saved killed run resumed with the installed libraries, and the same command run here
    uninterrupted."""

    name: str
    killed_at: int
    total: int
    said: str  # the resumed run's output
    resumed: Path
    straight: Path

    def metrics(self) -> list[dict]:
        """The resumed run's and the uninterrupted run's ``metrics.json``."""
        return [json.loads((folder / "metrics.json").read_text()) for folder in (self.resumed, self.straight)]


@pytest.fixture(scope="module", params=sorted(KILLED))
def resumed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Resumed:
    name = request.param
    overrides, killed_at, total = KILLED[name]
    folder = tmp_path_factory.mktemp(name)
    resumed, straight = folder / "resumed", folder / "straight"
    shutil.copytree(SAVED / name, resumed)
    train = [sys.executable, str(REPO / "experiments" / "train.py"), *overrides]
    run([*train, f"hydra.run.dir={straight}"])
    out = run([*train, f"hydra.run.dir={resumed}"])
    return Resumed(name, killed_at, total, out.stdout, resumed, straight)


def _same(a: object, b: object) -> bool:
    """Nested states (dicts, lists, tensors, arrays, numbers) hold the same values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor | np.ndarray) or isinstance(b, torch.Tensor | np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


def _assert_sb3_checkpoint_loads_as_saved(folder: Path, overrides: list[str]) -> None:
    """Network, optimizer, generators and every environment's place in its stream come back as saved;
    the environments' replayed observations are the ones the run saved (SB3's last observation)."""
    from hydra import compose, initialize_config_module

    from dynamiccl.agents.training.envs_factory import make_training_env
    from dynamiccl.agents.training.resume_state import restore

    path = folder / "checkpoints" / "last.zip"
    with initialize_config_module("dynamiccl.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    model, meta = load_checkpoint(path, env=make_training_env(cfg))
    with zipfile.ZipFile(path) as zf:
        optimizer = torch.load(io.BytesIO(zf.read("policy.optimizer.pth")), weights_only=True)
    assert _same(model.policy.state_dict(), _saved_network(folder.name)), "the network"
    assert _same(model.policy.optimizer.state_dict(), optimizer), "the optimizer"
    saved = meta["resume"]
    with resume_state.preserved_rng():  # this process's generators are the suite's, not the run's
        observations = restore(model, saved)
        restored_rng = resume_state.global_rng_state()
    assert np.array_equal(observations, model._last_obs), \
        "the environments' saved places in their episode streams no longer replay to their observations"
    assert _same(model.action_space.np_random.bit_generator.state, saved["action_space"])
    assert _same(restored_rng, saved["rng"]), "torch's, numpy's and Python's generators"


def _assert_round_checkpoint_loads_as_saved(folder: Path, name: str, killed_at: int) -> None:
    """The learner's network, optimizer, generator and step come back as saved."""
    from dynamiccl.agents.training import full_info_agent, prior_agent

    agent = (full_info_agent if name.startswith("full_info") else prior_agent).AGENT
    path = folder / "checkpoints" / "last.pt"
    learner, restored = agent.load_checkpoint(path)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    state = torch.load(round_checkpoints.resume_file(path, killed_at), map_location="cpu", weights_only=True)
    assert restored and learner.samples_seen == saved["samples_seen"] == killed_at
    assert _same(learner.network.state_dict(), saved["state"]), "the network"
    assert _same(learner.optimizer.state_dict(), state["optimizer"]), "the optimizer"
    assert _same(learner.rng.bit_generator.state, state["rng"]), "the generator"


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_saved_killed_run_resumes_at_its_step_with_its_state_and_ends_near_the_uninterrupted_run(
        resumed: Resumed):
    """What holds whatever library versions are installed: the run resumes at the saved step with
    everything it saved restored, and ends where an uninterrupted run ends, up to the rounding in
    which other library versions or another CPU may compute the first segment."""
    overrides, killed_at, total = KILLED[resumed.name]
    said = resumed.said.split(f"resuming at step {killed_at} of {total}")
    assert len(said) == 2 and "restored" in said[1].splitlines()[0], resumed.said[-2000:]
    steps = checkpoint_steps(resumed.resumed)
    assert steps[0] == killed_at and steps[-1] >= total
    if resumed.name.startswith("maskable_ppo"):
        _assert_sb3_checkpoint_loads_as_saved(SAVED / resumed.name, overrides)
    else:
        _assert_round_checkpoint_loads_as_saved(SAVED / resumed.name, resumed.name, killed_at)
    a, b = _trained(resumed.resumed), _trained(resumed.straight)
    assert a.keys() == b.keys()
    far = {k: float(np.abs(a[k] - b[k]).max() / (np.abs(b[k]).max() + 1e-12)) for k in a}
    assert max(far.values()) < NEAR, f"parameters far from the uninterrupted run's: {far}"
    now, then = resumed.metrics()
    assert now.keys() == then.keys() and now["step"] == then["step"]
    for key in now.keys() - {"train_seconds", "step"}:
        assert (now[key] is None) == (then[key] is None), key
        assert now[key] is None or abs(now[key] - then[key]) <= NEAR_SCORE * max(1.0, abs(then[key])), key


def _why_not_reproducible(resumed: Resumed) -> str | None:
    """None where this installation computes the saved run's first segment bit for bit as it was
    computed when saved (the uninterrupted run here holds the saved parameters at the kill step),
    else why not: then nothing promises a bit-identical continuation."""
    from stable_baselines3.common.utils import get_system_info

    with zipfile.ZipFile(SAVED / "maskable_ppo_killed" / "checkpoints" / "last.zip") as zf:
        recorded = dict(line.removeprefix("- ").split(": ", 1)
                        for line in zf.read("system_info.txt").decode().splitlines() if ": " in line)
    here = get_system_info(print_info=False)[0]
    other = [f"{k} {recorded[k]} (here {here.get(k)})" for k in VERSIONS if here.get(k) != recorded[k]]
    if other:
        return f"saved under other library versions: {', '.join(other)}"
    history = resumed.straight / "checkpoints" / "history.jsonl"
    held = {row["step"]: row.get("parameters") for row in map(json.loads, history.read_text().splitlines())}
    if held.get(resumed.killed_at) != parameters_digest(_saved_network(resumed.name)):
        return (f"the saved library versions, but the uninterrupted run here holds other parameters at "
                f"step {resumed.killed_at} than the saved run did: this CPU's kernels round differently")
    return None


def _saved_network(name: str) -> dict[str, torch.Tensor]:
    """The network of the saved killed run's checkpoint, as saved."""
    folder = SAVED / name / "checkpoints"
    if (folder / "last.zip").is_file():
        with zipfile.ZipFile(folder / "last.zip") as zf:
            return torch.load(io.BytesIO(zf.read("policy.pth")), weights_only=True)
    return torch.load(folder / "last.pt", map_location="cpu", weights_only=True)["state"]


def test_an_old_prior_run_resumed_with_todays_realities_is_refused_by_name(tmp_path):
    """The saved prior run has no ``agent.model.realities``: it reads as what it trained against
    (``datasheet``), so resuming it with today's default is one line naming the key and the fix, and
    the folder is left as it was."""
    folder = tmp_path / "learned_prior_killed"
    shutil.copytree(SAVED / folder.name, folder)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    today = [o for o in KILLED[folder.name][0] if o != "agent.model.realities=datasheet"]
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "train.py"), *today,
                          f"hydra.run.dir={folder}"], capture_output=True, text=True, env=ENV, cwd=REPO,
                         timeout=600)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stderr.strip() == (
        f"dynamiccl train: error: {folder} was started with other settings: agent.model.realities "
        "('datasheet' -> 'system'). Resume with the same settings, choose a new run folder "
        "(hydra.run.dir=PATH), or add resume.allow_changes=true to continue with the new ones")
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".lock"} == before


@pytest.mark.slow
@pytest.mark.multiproc
def test_a_saved_killed_run_resumes_bit_identical_where_this_installation_reproduces_it(resumed: Resumed):
    """Where the installed libraries (and this CPU) compute the saved first segment exactly as it
    was computed, the resumed run ends bit-identical to the uninterrupted one and scores the same."""
    why = _why_not_reproducible(resumed)
    if why is not None:
        pytest.skip(why)
    a, b = _trained(resumed.resumed), _trained(resumed.straight)
    assert not [k for k in a if not np.array_equal(a[k], b[k])], "parameters differ"
    metrics = resumed.metrics()
    for m in metrics:
        del m["train_seconds"]
    assert metrics[0] == metrics[1], "the resumed run scores as the uninterrupted one"


def _recorded_targets() -> set[str]:
    """Every dynamiccl ``_target_`` the saved run folders' ``config.yaml`` files record."""
    from omegaconf import OmegaConf

    found = set()
    for config in SAVED.glob("*/config.yaml"):
        flat = OmegaConf.to_container(OmegaConf.load(config))
        stack = [flat]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                target = node.get("_target_")
                if isinstance(target, str) and target.startswith("dynamiccl."):
                    found.add(target)
                stack += list(node.values())
    return found


def test_the_table_of_moved_modules_holds_exactly_what_saved_folders_name():
    import importlib
    import importlib.util

    from hydra.utils import get_object

    from dynamiccl.agents import MOVED, current_name

    recorded = _recorded_targets()
    assert {target.rsplit(".", 1)[0] for target in recorded} == set(MOVED)
    for target in recorded:
        assert importlib.util.find_spec(target.rsplit(".", 1)[0]) is None, f"{target}: not moved?"
        assert callable(get_object(current_name(target)))
    assert current_name("dynamiccl.agents.policies.full_info.FullInfoConfig") == \
        "dynamiccl.agents.policies.full_info.FullInfoConfig"
    assert current_name("dynamiccl.agents.full_info_x.Y") == "dynamiccl.agents.full_info_x.Y"


def test_a_moved_target_is_the_same_setting_and_another_target_is_not():
    from dynamiccl.agents.training.run_folder import changed_keys

    def config(target: str) -> dict:
        return {"agent": {"model": {"_target_": target, "hidden": 8}}}

    old = config("dynamiccl.agents.full_info.FullInfoConfig")
    assert changed_keys(old, config("dynamiccl.agents.policies.full_info.FullInfoConfig")) == {}
    assert changed_keys(old, config("dynamiccl.agents.training.prior_learner.PriorConfig")) == {
        "agent.model._target_": ("dynamiccl.agents.policies.full_info.FullInfoConfig",
                                 "dynamiccl.agents.training.prior_learner.PriorConfig")}
