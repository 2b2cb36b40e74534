"""The decision window and the tuning bookkeeping as plain functions (no processes)."""

from __future__ import annotations

import pytest

from dynamiccl.runtime.decide import DecisionWindow, JobState
from dynamiccl.runtime.tuning import (
    KEEP_DEFAULT,
    MEASURE_CANDIDATE,
    MEASURE_DEFAULT,
    PIN_WINNER,
    Candidate,
    SizeBin,
    Tuning,
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


@pytest.mark.parametrize("times, final", [((100.0, 90.0, 120.0), (PIN_WINNER, Candidate(1, 2, 8))),
                                          ((100.0, 130.0, 120.0), (KEEP_DEFAULT, None))])
def test_the_gate_pins_only_a_candidate_faster_than_nccls_own_choice(times, final):
    b = SizeBin.of(5000)
    assert (b.min_bytes, b.max_bytes) == (4096, 8192) and 5000 in b
    tuner = _Scripted([Candidate(1, 2, 8), Candidate(0, 2, 0)])
    t = Tuning(tuner, [b])
    kinds = [t.apply(t.next_action(None))]
    for us in times:
        kinds.append(t.apply(t.next_action(us)))
    assert [k for k, _ in kinds] == [MEASURE_DEFAULT, MEASURE_CANDIDATE, MEASURE_CANDIDATE, final[0]]
    assert kinds[-1][1] == final[1] and t.active is None
    assert tuner.seen == [(Candidate(1, 2, 8), times[1]), (Candidate(0, 2, 0), times[2])]
