"""The plugin never breaks a job: sanitizer runs on hostile input, a bounded fuzz run of the
parser, and many communicators from many threads at once.

Everything here is real: the plugin and the C harnesses (dynamiccl/plugin/csrc/tests/) are compiled with
gcc's AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included) or ThreadSanitizer,
and the fuzz target with clang's libFuzzer. Builds are cached per test session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sanitizers import ASAN, TSAN, clang_fuzzer, tsan_works

from dynamiccl.plugin import build as plugin
from dynamiccl.plugin import policy_file as pf
from dynamiccl.system import nccl
from dynamiccl.system.nccl import Algorithm, Collective, Protocol

SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
SRC = plugin.source_dir()
TESTS = SRC / "tests" if SRC else None

pytestmark = pytest.mark.skipif(SRC is None, reason="needs the C sources (a source checkout)")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.getbasetemp() / "dynamiccl-c-builds"


def _harness(name: str, cache: Path, flags: list[str], *, with_parser: bool = False,
             cc: str | None = None) -> Path:
    sources = [TESTS / f"{name}.c"] + ([SRC / "policy.c", SRC / "view.c", SRC / "fleet.c"]
                                       if with_parser else [])
    # -rdynamic: the harness answers ncclGetVersion for the plugin, as NCCL does
    return plugin.compile_c(sources, name, flags=["-std=c11", "-Wall", "-Wextra", "-rdynamic", *flags],
                            cache=cache, cc=cc, depends=[*TESTS.glob("*.h"), *plugin.headers(SRC)])


@pytest.fixture(scope="module")
def seed_policies(tmp_path_factory) -> list[Path]:
    """Valid starting points for mutation: a real export and a file using every format feature."""
    from dynamiccl.agents.policies.registry import load_policy
    from dynamiccl.agents.shipping.export import export_policy
    from dynamiccl.system.topology import load_topology

    folder = tmp_path_factory.mktemp("seeds")
    topo = load_topology("dgx_h100", nodes=2)
    exported = export_policy(load_policy("oracle", topology=topo, deployable=True), topo,
                             node_counts=[1, 2, 4], contexts=[pf.DEFAULT_CONTEXT, ("long", "low")],
                             gate=None)  # ungated: a seed file rich in forced decisions
    ar = Collective.ALLREDUCE
    features = pf.PolicyFile(exported.policy_file.header, (
        pf.Slice(rules=(
            pf.Rule(ar, 0, 4095, 2, 16, decision=pf.Decision(Algorithm.PAT, Protocol.SIMPLE, 64)),
            pf.Rule(ar, 4096, pf.MAX_BYTES, 2, 16,
                    decision=pf.Decision(Algorithm.NVLS_TREE, Protocol.SIMPLE, None)),
            pf.Rule(ar, 0, 100, None, 16, decision=pf.Decision(Algorithm.TREE, Protocol.LL, 1)),
            pf.Rule(Collective.BROADCAST, 5, 10, None, None),
        )),
        pf.Slice("short", "high", (pf.Rule(ar, 0, 1, 2, 16),)),
    ))
    return [pf.write(exported.policy_file, folder / "oracle.dccl"),
            pf.write(features, folder / "features.dccl")]


def _run(cmd: list, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DYNAMICCL_", "NCCL_"))}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          env={**clean, **SAN_ENV, **env})


@pytest.mark.slow
@pytest.mark.parametrize("seed_index", [0, 1])
def test_thousands_of_hostile_files_and_calls_under_asan_ubsan(cache, seed_policies, tmp_path,
                                                               seed_index):
    library = plugin.build(flags=ASAN, cache=cache)
    robust = _harness("robust", cache, ASAN, with_parser=True)
    # a process per file (the plugin reads its policy once per process), 120 calls each
    proc = _run([robust, library, seed_policies[seed_index], tmp_path, 600, 11 + seed_index])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    verdict = dict(kv.split("=") for kv in proc.stdout.split()[1:])
    assert proc.stdout.startswith("PASS")
    # both sides were exercised: files the plugin used and files it refused
    assert int(verdict["valid"]) > 40 and int(verdict["invalid"]) > 400
    assert "ERROR" not in proc.stderr and "runtime error" not in proc.stderr


def test_the_robustness_harness_catches_a_write_to_an_unusable_entry(cache, seed_policies,
                                                                     tmp_path):
    """Guard against a harness that cannot fail: break the usability check and expect FAIL."""
    broken = tmp_path / "broken"
    shutil.copytree(SRC, broken, ignore=shutil.ignore_patterns("tests"))
    tuner = broken / "tuner.c"
    text = tuner.read_text()
    assert "!(*entry >= 0.0f)" in text
    tuner.write_text(text.replace("!(*entry >= 0.0f)", "0"))
    library = plugin.compile_c(plugin.sources(broken), plugin.LIBRARY_NAME,
                               flags=[*plugin.cflags(broken), *ASAN], shared=True, cache=cache,
                               depends=plugin.headers(broken))
    robust = _harness("robust", cache, ASAN, with_parser=True)
    proc = _run([robust, library, seed_policies[0], tmp_path, 400, 3])
    assert proc.returncode != 0 and "was unusable" in proc.stdout


#: Inputs the bounded libFuzzer run feeds the parser (a few seconds with ASan and UBSan).
FUZZ_RUNS = 20_000


@pytest.mark.slow
def test_bounded_libfuzzer_run_of_the_parser(cache, seed_policies, tmp_path):
    clang = clang_fuzzer()
    if clang is None:
        pytest.skip("clang with libFuzzer is not installed (apt-get install -y clang)")
    fuzzer = plugin.compile_c([TESTS / "fuzz_parser.c", SRC / "policy.c", SRC / "view.c"],
                              "fuzz_parser", cc=clang, cache=cache,
                              flags=["-fsanitize=fuzzer,address,undefined",
                                     "-fno-sanitize-recover=all", "-g", "-O1"],
                              depends=plugin.headers(SRC))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for seed in seed_policies:  # bodies without the checksum line: the target appends one
        text = seed.read_text()
        (corpus / seed.stem).write_text(text[: text.rindex("checksum")])
    dictionary = tmp_path / "policy.dict"
    names = [*nccl.COLLECTIVE_TOKENS.values(), *nccl.ALGORITHM_TOKENS.values(),
             *nccl.PROTOCOL_TOKENS.values()]
    dictionary.write_text((TESTS / "policy.dict").read_text() + "".join(f'"{n}"\n' for n in names))
    # A fixed number of inputs from a fixed seed, not a time budget: the same work on any machine,
    # however loaded (15 s of a busy machine's time once ran too few inputs to count).
    proc = _run([fuzzer, f"-runs={FUZZ_RUNS}", "-seed=1", "-timeout=10", "-rss_limit_mb=2048",
                 f"-dict={dictionary}", "-print_final_stats=1", corpus], timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = int(next(line.split()[-1] for line in proc.stderr.splitlines()
                    if line.startswith("stat::number_of_executed_units")))
    assert runs >= FUZZ_RUNS



@pytest.mark.parametrize("sanitizer", ["thread", "address"])
@pytest.mark.parametrize("runtime", [False, True], ids=["static", "with-runtime-calls"])
def test_many_communicators_from_many_threads(cache, seed_policies, sanitizer, runtime):
    """With runtime calls, one more thread keeps switching the context, pinning and unpinning and
    reading the hash while the others query: the lock-free hot path must be race-free."""
    flags = TSAN if sanitizer == "thread" else ASAN
    if sanitizer == "thread" and not tsan_works(cache):
        pytest.skip("ThreadSanitizer cannot run on this kernel/compiler")
    library = plugin.build(flags=flags, cache=cache)
    threads = _harness("threads", cache, flags)
    proc = _run([threads, library, 8, 25, *(["runtime"] if runtime else [])],
                DYNAMICCL_POLICY=str(seed_policies[0]), DYNAMICCL_LOG_DECISIONS="1",
                TSAN_OPTIONS="halt_on_error=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.startswith("PASS threads=8 rounds=25")
    assert "WARNING: ThreadSanitizer" not in proc.stderr
    if runtime:
        assert int(proc.stdout.split("mutations=")[1]) > 0
