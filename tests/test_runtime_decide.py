"""The decision window and the tuning bookkeeping as plain functions (no processes)."""

from __future__ import annotations

import pytest

from dynamiccl.runtime.decide import DecisionWindow, JobState
from dynamiccl.runtime.timing import trimmed_mean
from dynamiccl.runtime.tuning import (
    KEEP_DEFAULT,
    MAX_TRIALS_EACH,
    MEASURE_CANDIDATE,
    MEASURE_DEFAULT,
    PIN_WINNER,
    Candidate,
    SizeBin,
    Tuning,
    verdict,
)


def test_a_persistent_straggler_needs_most_of_the_window():
    w = DecisionWindow(window=5, threshold_us=1000.0, majority=0.6)
    late_2 = [3000.0, 2900.0, 9000.0, 2950.0]  # rank 2's first bucket came 6 ms after the others'
    calm = [5000.0, 5100.0, 5050.0, 5020.0]
    for sample in (late_2, calm, late_2):
        w.add(sample, [0.5] * 4)
    assert w.decide().straggler is None  # 2 of 5 is not most of the window
    w.add(late_2, [0.5] * 4)
    d = w.decide()
    assert d.straggler == 2 and d.delay_us == pytest.approx(6000.0) and d.context == ("long", "low")
    for _ in range(4):
        w.add(calm, [3.0] * 4)
    assert w.decide() == JobState(None, 0.0, 3.0)  # gone again once the window forgets it


def test_decisions_survive_the_broadcast_encoding():
    for d in (JobState(), JobState(5, 1234.5, 0.25)):
        assert JobState.decode(d.encode()) == d


def test_bad_window_settings_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="majority in"):
        DecisionWindow(majority=0.2)


class _Scripted:
    def __init__(self, proposals):
        self.proposals, self.seen = list(proposals), []

    def propose(self, size_bin):
        return self.proposals.pop(0) if self.proposals else None

    def observe(self, size_bin, candidate, time_us):
        self.seen.append((candidate, time_us))


A, B = Candidate(1, 2, 8), Candidate(0, 2)


def _drive(times: dict, proposals=(A, B)) -> tuple[list, _Scripted]:
    """Runs one bin to its decision; each trial of a choice (None: NCCL's) takes the next of its
    ``times``. Returns the (kind, candidate) of every action, and the tuner."""
    b = SizeBin.of(5000)
    assert (b.min_bytes, b.max_bytes) == (4096, 8192) and 5000 in b
    tuner = _Scripted(list(proposals))
    t = Tuning(tuner, [b])
    left = {c: list(v) for c, v in times.items()}
    actions = [t.apply(t.next_action(None))]
    while t.active is not None:
        actions.append(t.apply(t.next_action(left[actions[-1][1]].pop(0))))
    return actions, tuner


def test_a_winner_clear_of_the_noise_is_pinned_after_two_trials_of_it_and_of_nccl():
    actions, tuner = _drive({None: [100.0, 101.0], A: [90.0, 90.5], B: [120.0]})
    assert [k for k, _ in actions] == [MEASURE_DEFAULT, MEASURE_CANDIDATE, MEASURE_CANDIDATE,
                                       MEASURE_CANDIDATE, MEASURE_DEFAULT, PIN_WINNER]
    assert actions[3][1] == A and actions[-1] == (PIN_WINNER, A)
    assert tuner.seen == [(A, 90.0), (B, 120.0), (A, 90.5)]  # repeats teach the tuner too


def test_a_candidate_clearly_slower_keeps_nccls_choice():
    """B's two trials agree: 19 % slower is beyond any spread they show, so NCCL's one trial is
    enough to keep it (only a pin needs two trials of each)."""
    actions, _ = _drive({None: [100.0, 100.5], A: [130.0, 131.0], B: [120.0, 119.0]})
    assert actions[-1] == (KEEP_DEFAULT, None) and len(actions) == 5


def test_one_fast_trial_in_the_noise_is_measured_again_before_anything_is_pinned():
    """The old gate pinned A after one trial at 90 µs against 100 µs; its later trials say it is
    no faster, so NCCL's choice stays."""
    actions, _ = _drive({None: [100.0, 96.0, 104.0, 99.0, 101.0], A: [90.0, 104.0, 99.0, 102.0, 97.0]},
                        proposals=(A,))
    kinds = [k for k, _ in actions]
    assert kinds.count(MEASURE_CANDIDATE) >= 2 and kinds.count(MEASURE_DEFAULT) >= 2
    assert actions[-1] == (KEEP_DEFAULT, None)


def test_a_decision_the_noise_cannot_settle_keeps_nccls_choice_without_trials_to_the_cap():
    """Two trials each spread 20-30 %: at the 9 % A gains, even MAX_TRIALS_EACH trials each could
    not clear that spread, so more would only cost."""
    actions, _ = _drive({None: [100.0, 80.0, 120.0, 90.0, 110.0], A: [95.0, 70.0, 120.0, 75.0, 110.0]},
                        proposals=(A,))
    kinds = [k for k, _ in actions]
    assert kinds.count(MEASURE_DEFAULT) == kinds.count(MEASURE_CANDIDATE) == 2 < MAX_TRIALS_EACH
    assert actions[-1] == (KEEP_DEFAULT, None)


@pytest.mark.parametrize(("default", "best", "expected"), [
    ([100.0], [50.0], None),                       # one trial decides nothing
    ([100.0, 100.0], [0.0, 90.0], None),           # nor one that timed no call
    ([100.0, 100.0], [90.0, 90.0], PIN_WINNER),
    ([100.0, 100.0], [99.5, 99.5], KEEP_DEFAULT),  # below HOLD_MARGIN even without noise
    ([100.0, 110.0], [90.0, 100.0], KEEP_DEFAULT),  # 10 % apart, trials 10 % apart: 5 each cannot tell
    ([100.0, 106.0], [90.0, 96.0], None),          # 10 % apart, trials 6 % apart: more can tell
    ([100.0, 110.0, 105.0, 104.0], [90.0, 91.0, 89.0, 90.0], PIN_WINNER),
])
def test_the_verdict_weighs_the_gain_against_the_trials_spread(default, best, expected):
    assert verdict(default, best) == expected


def test_a_trial_is_a_trimmed_mean_of_its_calls():
    assert trimmed_mean([10.0, 11.0, 9.0, 10.0, 500.0]) == pytest.approx(10.333333)
    assert trimmed_mean([10.0, 30.0]) == 20.0 and trimmed_mean([]) == 0.0
