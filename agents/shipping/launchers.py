"""A measurement plan as launches a person runs: one nccl-tests command per launch, for the cluster's
launcher, each writing a named log that says how it was run.

A launch is one nccl-tests run of one choice over a contiguous run of powers of two (``-b/-e -f
2``), in the plan's rounds (:func:`~dynamiccl.agents.shipping.tune_plan.launch_order`). Each one runs
with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV NCCL_DEBUG_FILE=`` (NCCL's lines in the launch's
output, even where an ``NCCL_DEBUG_FILE`` was exported), so its own log states the NCCL release and
every variable that forced NCCL (``NCCL_ALGO set by environment to Ring``, NCCL
``src/graph/tuning.cc``), and writes ``<logs>/<name>.txt``; the script :func:`script` writes also a
sidecar ``<name>.yaml`` (:func:`~dynamiccl.profiler.formats.published.sidecar_text`: nodes, ranks
per node, launch mode, forcing) once the launch has finished. ``tune --measurements <logs>`` reads
them back without a guess.

A choice naming a knob NCCL has no variable for (a chunk size: only a tuner plugin's getChunkSize
sets it, NCCL 2.30.3 and later) is measured through DynamICCL's tuner plugin: its launch loads the
plugin (``NCCL_TUNER_PLUGIN``) with a one-rule pin policy (:func:`pin_policy`, ``<logs>/<name>.dccl``:
the collective, exactly the launch's sizes and communicator, every knob of the choice; no
``NCCL_ALGO``, under which the plugin steps aside), its SHA-256 expected on every rank
(``DYNAMICCL_POLICY_SHA256``), and ``NCCL_DEBUG_SUBSYS`` with ``TUNING`` and
``DYNAMICCL_LOG_DECISIONS=1``, so its log shows the plugin applying the pin; the sidecar records
what was pinned, and ``tune`` refuses the log where NCCL's lines do not show it
(:mod:`~dynamiccl.profiler.formats.plugin_log`).

The variables must reach every rank (ranks that choose differently hang NCCL), so each launcher
gets them its own way: ``srun --export=ALL`` propagates the caller's whole environment to every task
(srun(1), ``--export``), OpenMPI forwards those named with ``-x``, MPICH's and Intel MPI's Hydra
those named with ``-genv`` (set before ``mpirun`` they reach the local ranks only); a single-node
launch is one process driving every GPU (``-g N``), which inherits the shell's.

What a plan costs is estimated, not measured: a start-up per launch (:data:`STARTUP_S`) and, per
size, nccl-tests' calls (:data:`WARMUP_ITERS` + :data:`ITERS`, out of place and in place) at the
model's time of the choice, times the launch's nodes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dynamiccl.agents.shipping.tune_measurements import Choice
from dynamiccl.agents.shipping.tune_plan import PlannedMeasurement, launch_order
from dynamiccl.plugin import policy_file as pf
from dynamiccl.plugin.policy_format import LOG_DECISIONS_ENV, POLICY_ENV, POLICY_SHA256_ENV
from dynamiccl.profiler.formats.measurement_paths import LAUNCH_LIST_SUFFIX
from dynamiccl.profiler.formats.plugin_log import PIN_POLICY_PREFIX, pin_policy_launch
from dynamiccl.profiler.formats.published import sidecar_text
from dynamiccl.system.knobs import Collective
from dynamiccl.system.nccl import DEBUG_FILE_ENV, TUNER_PLUGIN_ENV
from dynamiccl.system.scenario import Scenario
from dynamiccl.system.topology import LAUNCH_MODES, Topology
from dynamiccl.system.units import format_size

#: The launchers a plan is written for: ``local`` one process driving one node's GPUs, ``srun``
#: Slurm, ``openmpi`` and ``mpich`` (MPICH and Intel MPI) an MPI launcher across nodes.
LAUNCHERS = ("local", "srun", "openmpi", "mpich")
#: Where NCCL's debug lines go: the launch's output, whatever the environment says. An
#: ``NCCL_DEBUG_FILE`` a site or user exported sends them to that file instead, leaving the log
#: without the release and the plugin's lines; set empty it names no file, and NCCL keeps stdout
#: (NCCL ``src/debug.cc`` opens a file only for a name that is not empty, in every release). Set
#: rather than unset, it reaches ranks MPI starts over ssh with a login shell's environment too, and
#: outranks ``~/.nccl.conf`` and ``/etc/nccl.conf``, which never overwrite a variable that is set.
DEBUG_TO_LOG = {DEBUG_FILE_ENV: ""}
#: What every launch sets so that its log records the NCCL release and NCCL's forcing (INIT prints
#: the version banner, ENV every NCCL variable set; TUNING's per-call lines are left out: one line
#: per call and rank), into the launch's own output (:data:`DEBUG_TO_LOG`).
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV", **DEBUG_TO_LOG}
#: What a launch pinned through the plugin sets instead: TUNING too (the plugin logs through it),
#: and each distinct decision of the plugin logged once (``DYNAMICCL_LOG_DECISIONS=1``), so its log
#: shows the pin applied. TUNING adds NCCL's line per call and rank (its pick, which tune reads too).
PIN_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING", **DEBUG_TO_LOG,
                 LOG_DECISIONS_ENV: "1"}
#: The ``created`` of a plan's pin policies: a fixed time, so that a pin policy is a function of
#: its launch alone and planning again prints the same lines and SHA-256s (a printed line keeps
#: matching the policy file it names).
PIN_CREATED = "1970-01-01T00:00:00Z"
#: nccl-tests' warm-up and timed calls per size (``-w``, ``-n``), each out of place and in place.
WARMUP_ITERS, ITERS = 5, 20
#: Estimated start-up of one launch, seconds: the launcher, the CUDA context and NCCL's init
#: (bootstrap, topology search, connecting rings and trees), longer across nodes.
STARTUP_S = {True: 30.0, False: 10.0}  # keyed by "spans several nodes"

_BINARIES = {Collective.ALLREDUCE: "all_reduce_perf", Collective.ALLGATHER: "all_gather_perf",
             Collective.REDUCESCATTER: "reduce_scatter_perf", Collective.BROADCAST: "broadcast_perf",
             Collective.REDUCE: "reduce_perf"}
_MPI = {"openmpi": ("OpenMPI", "-N", lambda k, v: ["-x", _assign(k, v)]),
        "mpich": ("MPICH/Intel MPI", "-ppn", lambda k, v: ["-genv", k, v])}


class Shell(str):
    """A word the shell expands where the launch runs (``"$DYNAMICCL_PLUGIN"``), written as it is."""


def quote(word: str) -> str:
    """``word`` as a shell reads it back: quoted, or as it is where the shell is to expand it."""
    return word if isinstance(word, Shell) else shlex.quote(word)


#: How a printed launch line names the plugin: the library ``dynamiccl plugin path`` finds where
#: the line runs (as ``dynamiccl show``'s deploy lines do).
PRINTED_PLUGIN = Shell('"$(dynamiccl plugin path)"')
#: How the plan's script names it: a variable its head sets.
SCRIPT_PLUGIN = Shell('"$DYNAMICCL_PLUGIN"')


def script_policy(name: str) -> Shell:
    """How the plan's script names the pin policy ``name``: under the absolute logs folder its head
    sets (every rank reads the same file; the plugin warns at a relative path)."""
    return Shell(f'"$LOGS_ABS/{name}"')


@dataclass(frozen=True)
class Launch:
    """One nccl-tests run of the plan."""

    #: The plan's round (1: the first launch of every choice; 2: the first repeat ...).
    round: int
    collective: Collective
    nodes: int
    ranks_per_node: int
    choice: Choice
    #: The sizes it measures, ascending powers of two (``-b sizes[0] -e sizes[-1] -f 2``).
    sizes: tuple[int, ...]
    #: Estimated wall time, seconds (start-up included).
    seconds: float = 0.0
    #: The text of its pin policy where it is pinned through the plugin (:func:`with_pins`).
    pin: str = ""

    @property
    def nranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def name(self) -> str:
        """The log's name: round, collective, shape, choice and sizes (``r1_allreduce_16x8_ring-ll_
        64KiB-8MiB``, ``..._nvls-tree-simple-16kib-chunk_32MiB-128MiB``), unique within a plan."""
        choice = "default" if self.choice.is_default else \
            re.sub(r"[^a-z0-9]+", "-", self.choice.label().lower())
        return (f"r{self.round}_{self.collective.name.lower()}_{self.nodes}x{self.ranks_per_node}_"
                f"{choice}_{format_size(self.sizes[0])}-{format_size(self.sizes[-1])}")

    @property
    def pinned(self) -> bool:
        """Measured through DynamICCL's tuner plugin: its choice names a knob no NCCL variable sets
        (a chunk size), so the plugin pins the whole choice (NCCL_ALGO would switch it off)."""
        return bool(self.choice.unforceable())

    @property
    def forced(self) -> dict[str, str]:
        """The variables that make NCCL run the choice (empty: NCCL's default, or the plugin pins
        it)."""
        return {} if self.pinned else self.choice.env()

    @property
    def pin_file(self) -> str:
        """Its pin policy's file name, beside its log."""
        return f"{self.name}.dccl"

    @property
    def pin_sha256(self) -> str:
        return pf.content_hash(self.pin.encode("ascii"))

    def env(self, plugin: str = PRINTED_PLUGIN, policy: str = "") -> dict[str, str]:
        """The variables the launch sets: NCCL's debug lines and forcing, or for a launch pinned
        through the plugin, the plugin, its pin policy (``policy``: the path ranks read) and its
        SHA-256."""
        if not self.pinned:
            return {**DEBUG_ENV, **self.forced}
        if not self.pin:
            raise ValueError(f"{self.name} is pinned through the plugin and has no pin policy; make "
                             "the plan's launches with with_pins")
        return {**PIN_DEBUG_ENV, TUNER_PLUGIN_ENV: plugin, POLICY_ENV: policy,
                POLICY_SHA256_ENV: self.pin_sha256}

    @property
    def node_hours(self) -> float:
        return self.seconds * self.nodes / 3600

    def describe(self) -> str:
        which = f", launch {self.round}" if self.round > 1 else ""
        return (f"{self.choice.label()}, {format_size(self.sizes[0])}..{format_size(self.sizes[-1])}"
                f"{which}")


def launches(planned: Sequence[PlannedMeasurement], gpus_per_node: int,
             call_us: Callable[[PlannedMeasurement], float] | None = None) -> list[Launch]:
    """The plan as launches in the order to run them: round by round, per (collective, shape,
    choice) one launch per contiguous run of powers of two. A measurement's shape is its own
    (``nodes``: a communicator of a job's mix may spread 16 ranks over 16 nodes); where it names
    none, ranks fill nodes of ``gpus_per_node``. ``call_us`` gives one call's time for the
    estimate (default: none, start-up only)."""
    out: list[Launch] = []
    for launches_of_round in launch_order(planned):
        groups: dict[tuple, list[PlannedMeasurement]] = defaultdict(list)
        for m in launches_of_round:
            nodes = m.nodes or max(1, m.nranks // max(gpus_per_node, 1))
            groups[(m.collective, nodes, m.nranks // nodes, m.choice, m.launch)].append(m)
        for (coll, nodes, per_node, choice, round_), items in groups.items():
            by_size = {m.nbytes: m for m in items}
            for run in _runs(sorted(by_size)):
                calls_s = sum(call_us(by_size[n]) for n in run) / 1e6 if call_us else 0.0
                seconds = STARTUP_S[nodes > 1] + 2 * (WARMUP_ITERS + ITERS) * calls_s
                out.append(Launch(round_, coll, nodes, per_node, choice, tuple(run), seconds))
    return out


def with_pins(launches_: Sequence[Launch], topology: Topology) -> list[Launch]:
    """The launches, each one pinned through the plugin with its pin policy (:func:`pin_policy`)."""
    return [replace(x, pin=pin_policy(x, topology)) if x.pinned else x for x in launches_]


def pin_policy(launch: Launch, topology: Topology) -> str:
    """The policy file that makes the plugin run ``launch``'s choice, and nothing else: one rule for
    its collective, exactly its sizes and its communicator (nodes and ranks), naming every knob of
    the choice; every other call defers to NCCL.

    It is stamped with every NCCL release the plugin loads under (``DEFAULT_NCCL_RANGE``), since
    which NCCL the launch runs is not known when planning, and under a release outside its window
    the plugin would defer: the launch would time NCCL's default under the pin's name. Under an NCCL
    older than a knob's ``nccl_since`` NCCL never asks for it; either way the log then lacks the
    plugin's line for it and ``tune`` refuses the log, naming the release."""
    given = launch.choice.given()
    if launch.choice.algorithm is None or launch.choice.protocol is None:
        raise ValueError(f"{launch.choice.label()}: a pin names an algorithm and a protocol")
    system = topology.resized(nodes=launch.nodes, gpus_per_node=launch.ranks_per_node)
    rule = pf.Rule(launch.collective, launch.sizes[0], launch.sizes[-1], launch.nodes,
                   launch.nranks, pf.Decision(**given))
    identity = f"{launch.name} {launch.choice.label()} {launch.sizes}".encode()
    header = pf.Header(
        policy=f"{PIN_POLICY_PREFIX}{launch.name}", created=PIN_CREATED,
        topology="".join(c if " " < c <= "~" else "_" for c in system.name)[:pf.MAX_HEADER_VALUE],
        fingerprint=system.fingerprint(),
        features=pf.system_features(system.ll128_enabled, system.features.nvls,
                                    system.features.collnet),
        nccl=pf.DEFAULT_NCCL_RANGE, config_hash=hashlib.sha256(identity).hexdigest()[:16])
    return pf.dumps(pf.PolicyFile(header, (pf.Slice(rules=(rule,)),)))


def is_pin_policy_of(path: str | Path, launch: Launch) -> bool:
    """Whether ``path`` holds a pin policy a plan wrote for ``launch`` (which a plan may replace)."""
    return pin_policy_launch(path) == launch.name


def _runs(sizes: list[int]) -> list[list[int]]:
    runs: list[list[int]] = [[sizes[0]]]
    for n in sizes[1:]:
        if n == runs[-1][-1] * 2:
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs


def model_call_us(topology: Topology) -> Callable[[PlannedMeasurement], float]:
    """One call's time as NCCL's own pick under the measurement's forcing runs on the model of
    ``topology`` in the measurement's shape (NCCL's default's time where the model cannot run it)."""
    from dynamiccl import decisions

    def call_us(m: PlannedMeasurement) -> float:
        nodes = m.nodes or max(1, m.nranks // topology.gpus_per_node)
        system = topology.resized(nodes=nodes, gpus_per_node=m.nranks // nodes)
        scenario = Scenario(system, m.collective, m.nbytes)
        try:
            return decisions.nccl_default(scenario, m.choice.constraints).time_us
        except ValueError:
            return decisions.nccl_default(scenario).time_us
    return call_us


def default_launchers(launches_: Sequence[Launch]) -> tuple[str, ...]:
    """What a plan prints when no launcher is named: one node runs locally; across nodes, a line
    for OpenMPI and one for MPICH/Intel MPI."""
    return ("local",) if all(x.nodes == 1 for x in launches_) else ("openmpi", "mpich")


def check_launcher(launcher: str, launches_: Sequence[Launch]) -> str | None:
    """Why ``launcher`` cannot run the plan (None: it can)."""
    if launcher not in LAUNCHERS:
        return f"launcher {launcher!r} is none of {', '.join(LAUNCHERS)}"
    wide = max((x.nodes for x in launches_), default=1)
    if launcher == "local" and wide > 1:
        return (f"the plan spans {wide} nodes and a local launch runs on one; use srun, openmpi "
                "or mpich")
    return None


def _assign(name: str, value: str) -> str:
    return Shell(f"{name}={value}") if isinstance(value, Shell) else f"{name}={value}"


def command(launch: Launch, launcher: str, logs: str | None = None, *,
            plugin: str = PRINTED_PLUGIN, policy: str | None = None) -> list[str]:
    """The words of the launch under ``launcher`` (what a shell runs), with its output sent to
    ``<logs>/<name>.txt`` where ``logs`` is given (the script handles the output itself). A launch
    pinned through the plugin loads ``plugin`` with its pin policy at ``policy`` (default: the
    absolute path of ``<logs>/<name>.dccl``, the current folder's without ``logs``)."""
    local = launcher == "local"
    test = [_BINARIES[launch.collective], "-b", str(launch.sizes[0]), "-e", str(launch.sizes[-1]),
            "-f", "2", "-g", str(launch.nranks if local else 1), "-w", str(WARMUP_ITERS),
            "-n", str(ITERS)]
    if policy is None:
        policy = os.path.abspath(os.path.join(logs or ".", launch.pin_file))
    variables = launch.env(plugin, policy)
    env = [_assign(k, v) for k, v in variables.items()]
    if local:  # one process: the variables in its own environment
        words = ["env", *env, *test]
    elif launcher == "srun":
        words = ["env", *env, "srun", "--export=ALL", f"--nodes={launch.nodes}",
                 f"--ntasks-per-node={launch.ranks_per_node}",
                 f"--gpus-per-node={launch.ranks_per_node}", *test]
    else:
        _, per_node, set_var = _MPI[launcher]
        words = ["mpirun", "-np", str(launch.nranks), per_node, str(launch.ranks_per_node),
                 *[w for k, v in variables.items() for w in set_var(k, v)], *test]
    return words + ([">", f"{logs}/{launch.name}.txt", "2>&1"] if logs is not None else [])


def line(launch: Launch, launcher: str, logs: str) -> str:
    """One printed line: the command, its output file, and after ``  # `` what it measures (and
    which MPI it is written for)."""
    words = command(launch, launcher, logs)
    text = " ".join(w if w in (">", "2>&1") else quote(w) for w in words)
    name = _MPI[launcher][0] + ": " if launcher in _MPI else ""
    return f"{text}  # {name}{launch.describe()}{_pin_note(launch, logs)}"


def _pin_note(launch: Launch, logs: str) -> str:
    """What a launch pinned through the plugin adds to its description."""
    if not launch.pinned:
        return ""
    return (f"; pinned through DynamICCL's tuner plugin by {logs}/{launch.pin_file} (NCCL has no "
            f"variable for {', '.join(launch.choice.unforceable())})")


def launch_mode(launcher: str) -> str:
    """The sidecar's ``launch``: one process per GPU under a cluster launcher, one process driving
    the node's GPUs locally."""
    return LAUNCH_MODES[1] if launcher == "local" else LAUNCH_MODES[0]


def sidecar(launch: Launch, launcher: str, made_by: str, printed_logs: str | None = None,
            also: Sequence[str] = ()) -> str:
    """The sidecar the script writes beside a finished launch's log; with ``printed_logs`` (the
    logs folder of a printed plan) the one ``tune --plan`` writes beside a pinned launch's pin
    policy before the launch, labelling the log the printed line will write (``also``: the other
    launchers the plan printed a line for, which write the same log: their commands too)."""
    commands = {}
    if printed_logs is None:
        words = command(launch, launcher, plugin=SCRIPT_PLUGIN,
                        policy=script_policy(launch.pin_file))
        when = "written by the plan's script once the launch had finished"
    else:
        words = command(launch, launcher, printed_logs)[:-3]
        when = "written by `dynamiccl tune --plan` with the pin policy, before the launch"
        commands = {f"command_{name}": " ".join(quote(w) for w in command(launch, name, printed_logs)[:-3])
                    for name in also}
    pin = {"pinned": launch.choice, "policy": launch.pin_file,
           "policy_sha256": launch.pin_sha256} if launch.pinned else {}
    return sidecar_text(f"{launch.name}.txt", launch.collective, launch.nodes, launch.ranks_per_node,
                        launch_mode(launcher), launch.forced,
                        env=PIN_DEBUG_ENV if launch.pinned else DEBUG_ENV,
                        source={"plan": made_by, "launcher": " or ".join((launcher, *also)),
                                "command": " ".join(quote(w) for w in words), **commands},
                        notes=f"{launch.describe()}; {when} (its log states the NCCL release"
                              f"{' and the plugin applying its pin' if launch.pinned else ''})",
                        **pin)


def estimate(launches_: Sequence[Launch]) -> tuple[float, float]:
    """(wall seconds, node-hours) of running every launch one after another."""
    return sum(x.seconds for x in launches_), sum(x.node_hours for x in launches_)


def summary(launches_: Sequence[Launch], launcher: str) -> str:
    """One line: launches, shapes, launcher, estimated wall time and node-hours."""
    seconds, node_hours = estimate(launches_)
    shapes = ", ".join(f"{n} node{'s' if n > 1 else ''} x {r} rank{'s' if r > 1 else ''} per node"
                       for n, r in sorted({(x.nodes, x.ranks_per_node) for x in launches_}))
    repeats = sum(x.round > 1 for x in launches_)
    return (f"plan: {len(launches_)} launches ({repeats} repeats) on {shapes or 'no system'} "
            f"({launcher}), estimated {seconds / 60:.0f} min and {node_hours:.2f} node-hours "
            f"(start-up ~{STARTUP_S[True]:.0f} s a launch across nodes, {STARTUP_S[False]:.0f} s on "
            f"one; {2 * (WARMUP_ITERS + ITERS)} calls a size at the model's time)")


_SCRIPT_HEAD = """#!/usr/bin/env bash
# DynamICCL measurement plan, written by: {made_by}
# {summary}
#
# Run it where nccl-tests' binaries are on PATH (or NCCL_TESTS=/path/to/nccl-tests/build):
#   bash {script}              # every launch writes $LOGS/<name>.txt, then its sidecar <name>.yaml
#   bash {script} --dry-run    # print the launches, run nothing
# A launch whose log is there already is skipped: stop it any time (Ctrl-C) and run it again to
# go on. A failed launch stops the script (its output stays in <name>.txt.part); KEEP_GOING=1 runs
# the rest and lists the failures at the end.{launcher_note}
# Then: {then}
set -uo pipefail
LOGS=${{LOGS:-{logs}}}
NCCL_TESTS=${{NCCL_TESTS:-}}
{flags_var}=${{{flags_var}:-}}
DRY_RUN=0
[[ "${{1:-}}" == "--dry-run" ]] && DRY_RUN=1
failed=()
running=
# stop: Ctrl-C, Slurm's time limit, `timeout` or a closed terminal stops the running launch at once
# (one Ctrl-C only makes srun report its tasks; srun and mpirun pass SIGTERM on to every rank) and
# keeps its output as <name>.txt.part, which a run again redoes
stop() {{
  if [[ -n "$running" ]]; then kill -TERM "$running" 2>/dev/null; wait "$running"; fi
  echo "stopped: run bash {script} again to go on" >&2
  exit 130
}}
trap stop INT TERM HUP

# launch NAME WORDS... <<SIDECAR: run one launch into $LOGS/NAME.txt and write its sidecar
launch() {{
  local name=$1 sidecar; shift
  sidecar=$(cat)
  if (( DRY_RUN )); then  # the words as they run, an empty one (NCCL_DEBUG_FILE's) as ''
    local shown=() word empty="''"
    for word in "$@"; do shown+=("${{word:-$empty}}"); done
    echo "${{shown[*]}}  > $LOGS/$name.txt"
    return 0
  fi
  if [[ -f "$LOGS/$name.txt" ]]; then echo "skip $name (done)" >&2; return 0; fi
  mkdir -p "$LOGS"
  if [[ "${{PIN_NAME:-}}" == "$name" ]] && ! write_pin "$name"; then
    failed+=("$name")
    [[ "${{KEEP_GOING:-0}}" == 1 ]] || exit 1
    return 0
  fi
  echo "run  $name" >&2
  "$@" </dev/null >"$LOGS/$name.txt.part" 2>&1 &  # waited for, so that a signal stops it at once
  running=$!
  wait "$running"
  local status=$?
  running=
  if (( status == 0 )); then
    printf '%s\\n' "$sidecar" >"$LOGS/$name.yaml.part" && mv "$LOGS/$name.yaml.part" "$LOGS/$name.yaml"
    mv "$LOGS/$name.txt.part" "$LOGS/$name.txt"
  elif (( status == 130 || status == 143 )); then  # stopped by Ctrl-C or a kill: not a failure
    echo "stopped in $name: run bash {script} again to go on" >&2
    exit 130
  else
    echo "failed: $name (its output: $LOGS/$name.txt.part)" >&2
    failed+=("$name")
    [[ "${{KEEP_GOING:-0}}" == 1 ]] || exit 1
  fi
}}

"""

#: What a script with launches pinned through the plugin adds to its head.
_PIN_HEAD = """# Launches "pinned through DynamICCL's tuner plugin" measure a knob NCCL has no variable for:
# each loads the plugin (DYNAMICCL_PLUGIN, else `dynamiccl plugin path`) with a one-rule pin policy
# the script writes to $LOGS/<name>.dccl just before the launch, and logs the plugin's decisions;
# NCCL takes a chunk size from 2.30.3 on (`tune` refuses a log that does not show the pin applied).
DYNAMICCL_PLUGIN=${{DYNAMICCL_PLUGIN:-$(dynamiccl plugin path 2>/dev/null)}}
case $LOGS in /*) LOGS_ABS=$LOGS ;; *) LOGS_ABS=$PWD/$LOGS ;; esac

# pin NAME SHA256 <<POLICY: the pin policy of the launch NAME, which follows
pin() {{ PIN_NAME=$1 PIN_SHA=$2; PIN_TEXT=$(cat); }}

# write_pin NAME: $LOGS/NAME.dccl holds the pin policy, written atomically and never over a file
# that is not NAME's pin policy
write_pin() {{
  local name=$1 file="$LOGS/$1.dccl"
  if [[ -z "$DYNAMICCL_PLUGIN" || ! -f "$DYNAMICCL_PLUGIN" ]]; then
    echo "failed: $name loads DynamICCL's tuner plugin and none is here ('$DYNAMICCL_PLUGIN'):" \\
      "install dynamiccl, or set DYNAMICCL_PLUGIN=/path/to/libnccl-tuner-dynamiccl.so" >&2
    return 1
  fi
  if [[ -e "$file" || -L "$file" ]] && ! grep -qxF "policy {prefix}$name" "$file" 2>/dev/null; then
    echo "failed: $file is there and is not the pin policy of $name;" \\
      "move it away and run bash {script} again" >&2
    return 1
  fi
  printf '%s\\n' "$PIN_TEXT" >"$file.part" && mv -f "$file.part" "$file" || return 1
  if command -v sha256sum >/dev/null &&
      ! printf '%s  %s\\n' "$PIN_SHA" "$file" | sha256sum --check --status; then
    echo "failed: $file does not hash to $PIN_SHA;" \\
      "write the plan again (dynamiccl tune ... --plan --script)" >&2
    return 1
  fi
}}

"""

_SCRIPT_TAIL = """
if (( ${#failed[@]} )); then
  echo "${#failed[@]} launch(es) failed: ${failed[*]}" >&2
  exit 1
fi
(( DRY_RUN )) || echo "done: every launch is in $LOGS" >&2
"""


def script(launches_: Sequence[Launch], launcher: str, *, logs: str, made_by: str, then: str,
           name: str = "plan.sh") -> str:
    """The plan as a bash script for ``launcher``: resumable (a launch with its log is skipped),
    Ctrl-C safe (a launch's output is ``<name>.txt.part`` until it finishes; its sidecar is written
    before the log is renamed into place), ``--dry-run`` prints the launches. ``SRUN_FLAGS`` /
    ``MPIRUN_FLAGS`` (account, partition, ``--mpi=pmix``) and ``NCCL_TESTS`` (the binaries'
    folder) are read from the environment."""
    flags_var = {"srun": "SRUN_FLAGS", "local": "LOCAL_FLAGS"}.get(launcher, "MPIRUN_FLAGS")
    note = {"srun": "\n# Slurm: run it inside an allocation of the plan's nodes (salloc/sbatch); "
                    "SRUN_FLAGS adds srun options\n# (e.g. SRUN_FLAGS='--mpi=pmix -A acct').",
            "openmpi": "\n# MPIRUN_FLAGS adds mpirun options (a hostfile: MPIRUN_FLAGS='--hostfile "
                       "hosts').",
            "mpich": "\n# MPIRUN_FLAGS adds mpirun options (a hostfile: MPIRUN_FLAGS='-f hosts')."
            }.get(launcher, "")
    out = [_SCRIPT_HEAD.format(made_by=made_by, summary=summary(launches_, launcher), script=name,
                               then=then, logs=shlex.quote(logs), flags_var=flags_var,
                               launcher_note=note)]
    if any(x.pinned for x in launches_):
        out.append(_PIN_HEAD.format(prefix=PIN_POLICY_PREFIX, script=name))
    listed = f"$LOGS/{Path(name).stem}{LAUNCH_LIST_SUFFIX}"
    out.append("# the plan's launches, so that `tune` names those with no finished log yet")
    out.append(f'(( DRY_RUN )) || {{ mkdir -p "$LOGS" && printf \'%s\\n\' '
               f'{" ".join(x.name for x in launches_)} >"{listed}.part" && '
               f'mv -f "{listed}.part" "{listed}"; }} || exit 1\n')
    for x in launches_:
        words = command(x, launcher, plugin=SCRIPT_PLUGIN, policy=script_policy(x.pin_file))
        words = _with_flags(words, launcher, flags_var)
        out.append(f"# {x.describe()} ({x.nodes} x {x.ranks_per_node}, ~{x.seconds:.0f} s)"
                   f"{_pin_note(x, '$LOGS')}")
        if x.pinned:
            out.append(f"pin {x.name} {x.pin_sha256} <<'POLICY'")
            out.append(x.pin.rstrip("\n"))
            out.append("POLICY")
        out.append(f"launch {x.name} {' '.join(words)} <<'SIDECAR'")
        out.append(sidecar(x, launcher, made_by).rstrip("\n"))
        out.append("SIDECAR")
    out.append(_SCRIPT_TAIL)
    return "\n".join(out)


def _with_flags(words: list[str], launcher: str, flags_var: str) -> list[str]:
    """The command as script words: the launcher's extra flags spliced in unquoted (the user's
    ``$SRUN_FLAGS`` may hold several), the test binary found under ``$NCCL_TESTS`` when set."""
    quoted = [quote(w) for w in words]
    binary = next(i for i, w in enumerate(words) if w in _BINARIES.values())
    quoted[binary] = f'"${{NCCL_TESTS:+$NCCL_TESTS/}}{words[binary]}"'
    at = {"srun": words.index("srun") + 1 if "srun" in words else None,
          "openmpi": 1, "mpich": 1}.get(launcher)
    if at is not None:
        quoted.insert(at, f"${flags_var}")
    return quoted


def plan_lines(launches_: Sequence[Launch], launchers: Sequence[str] | None = None,
               logs: str = "logs") -> list[str]:
    """The printed plan: each launch once per launcher (default :func:`default_launchers`), in
    order."""
    names = tuple(launchers or default_launchers(launches_))
    return [line(x, launcher, logs) for x in launches_ for launcher in names]
