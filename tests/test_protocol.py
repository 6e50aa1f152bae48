"""The steady-state scoring rule (sgdsim.protocol) on synthetic step-end series, by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sgdsim.protocol import (
    SteadyRule,
    batch_means_half_width,
    batch_trend,
    completed_steps,
    describe_window,
    steady_estimate,
    steady_stop,
    steady_window_start,
    still_moving,
)

#: Student's t quantiles t_{df, 0.975} from a printed table (Law and Kelton,
#: Simulation Modeling and Analysis, 3rd ed., Table T.1), 4 significant digits.
T_975 = {1: 12.706, 3: 3.182, 9: 2.262}


def test_protocol_module_imports_no_testbed_and_no_tensorflow():
    import subprocess
    import sys

    code = (
        "import sys, sgdsim.protocol; "
        "bad = [m for m in sys.modules if m.startswith(('sgdsim.testbed', 'tensorflow'))]; "
        "print(bad); sys.exit(bool(bad))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_batch_means_half_width_by_hand():
    # batch means 1, 2, 3, 4: mean 2.5, S^2 = (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3,
    # half-width = t_{3,0.975} * sqrt(S^2 / 4) = 3.182 * 0.6455 = 2.054
    assert batch_means_half_width([1, 2, 3, 4], 0.95) == pytest.approx(
        T_975[3] * np.sqrt(5 / 3 / 4), rel=2e-4
    )
    assert batch_means_half_width([7.0] * 10, 0.95) == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        batch_means_half_width([1.0], 0.95)


def test_batch_trend_by_hand():
    # rates 1, 2, 3, 4: slope 1 per batch, 3 over the window, mean 2.5 -> +120 %,
    # on an exact line (p = 0)
    assert batch_trend([1, 2, 3, 4]) == (pytest.approx(1.2), True)
    assert batch_trend([4, 3, 2, 1]) == (pytest.approx(-1.2), True)
    # 5, 6, 5, 6, ...: slope (sum of (i - 4.5)(y - 5.5)) / 82.5 = 2.5 / 82.5 per batch,
    # * 9 / 5.5 = +5 % across, and far from significant
    change, significant = batch_trend([5, 6] * 5)
    assert change == pytest.approx(2.5 / 82.5 * 9 / 5.5) and not significant
    # 10, 10, 10, 11: slope 1.5 / 5 = 0.3, residuals .2 -.1 -.4 .3, s.e. sqrt(.3 / 2 / 5)
    # = 0.173, t = 1.73 on 2 dof, below t(0.975, 2) = 4.303
    assert batch_trend([10, 10, 10, 11])[1] is False
    assert batch_trend([2.0, 2.0, 2.0]) == (0.0, False)
    assert batch_trend([1.0, 2.0]) is None and batch_trend([0.0, 0.0, 0.0]) is None


def test_still_moving_needs_a_significant_trend_of_twice_the_rules_half_width():
    assert still_moving([1, 2, 3, 4]) == pytest.approx(1.2)
    # an exact line rising 5 across a mean of 102.5 (+4.9 %): significant, inside 2 x 3 %
    assert still_moving([100, 101.25, 102.5, 103.75, 105]) is None
    assert still_moving([100, 101.25, 102.5, 103.75, 105], min_change=0.04) == pytest.approx(
        5 / 102.5
    )
    assert still_moving([5, 6] * 5) is None  # +5 %, not significant
    assert still_moving([1.0, 2.0]) is None


def test_completed_steps_counts_the_share_of_the_step_in_progress():
    ends = [1.0, 2.5, 5.0]
    got = completed_steps(ends, np.array([1.0, 2.0, 2.5, 3.0, 5.0]))
    # 1 step done at 1.0; 2/3 of the second (1.0 -> 2.5) at 2.0; 0.5/2.5 of the third at 3.0
    assert got.tolist() == pytest.approx([1.0, 1 + 1 / 1.5, 2.0, 2.2, 3.0])


def test_steady_estimate_batch_means_by_hand():
    # worker A ends a step every second, B at 1, 2.5 and 5 s. One warm-up step,
    # no settling: the window is [1, 5] (A's and B's first step end at 1, and
    # both last end at 5). Two batches [1, 3] and [3, 5]: A completes 2 steps
    # in each; B completes 1.2 then 0.8 (at 3 s it is 0.5 / 2.5 into its third
    # step); batch rates (2 + 1.2) / 2 = 1.6 and (2 + 0.8) / 2 = 1.4 steps/s.
    ends = [[1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.5, 5.0]]
    rule = SteadyRule(warmup_steps=1, settle_s=0.0, min_steps=2, batches=2, max_s=10.0)
    est = steady_estimate(ends, rule)
    assert est is not None
    assert (est.start, est.end, est.window_s) == (1.0, 5.0, 4.0)
    assert est.batch_steps_per_s == pytest.approx((1.6, 1.4))
    # mean 1.5 = all 6 steps in the 4 s window; S^2 = 0.1^2 + 0.1^2 = 0.02 (b - 1 = 1)
    assert est.steps_per_s == pytest.approx(1.5)
    assert est.half_width == pytest.approx(T_975[1] * np.sqrt(0.02 / 2), rel=1e-4)
    assert est.rel_half_width == pytest.approx(est.half_width / 1.5)
    assert est.per_worker_steps_per_s == pytest.approx((1.0, 0.5))
    assert est.steps == (4, 2)  # step ends inside (1, 5]
    assert not est.converged  # ±85 % is far from ±3 %


def test_window_waits_for_every_worker_warm_up_and_the_settle_period():
    ends = [[0.5, 1.0, 1.5, 2.0, 2.5, 3.0], [0.9, 2.1, 2.4, 3.2]]
    rule = SteadyRule(warmup_steps=2, settle_s=0.25, batches=2)
    # B is warm last (its 2nd step ends at 2.1); A's last step end closes the window
    assert steady_window_start(ends, rule) == 2.1 + 0.25
    est = steady_estimate(ends, rule)
    assert est is not None and (est.start, est.end) == (2.35, 3.0)
    assert steady_window_start([[0.5, 1.0], [0.9]], rule) is None  # B not warm yet
    assert steady_estimate([e[:4] for e in ends], rule) is None  # A stops at 2.0: no window
    with pytest.raises(ValueError, match="after a worker's last step end"):
        steady_estimate(ends, rule, end=3.1)


def test_a_steady_series_converges_at_the_first_check_with_enough_steps():
    # A ends a step every 0.25 s, B every 0.375 s (exact binary fractions). One
    # warm-up step, no settling: the window starts at 0.375. Every batch holds
    # exactly 4 + 1/0.375 steps/s, so the half-width is 0 and the rule waits only
    # for 30 step ends of B in (0.375, 0.375 + k]: floor(k / 0.375) >= 30 first
    # at k = 12 s (k = 11 gives 29).
    ends = [[0.25 * i for i in range(1, 200)], [0.375 * i for i in range(1, 200)]]
    rule = SteadyRule(warmup_steps=1, settle_s=0.0, min_steps=30, check_every_s=1.0, max_s=60)
    est = steady_stop(ends, rule)
    assert est is not None and est.converged
    assert est.start == 0.375 and est.end == 0.375 + 12
    assert est.steps == (48, 32)
    assert est.steps_per_s == pytest.approx(4 + 1 / 0.375)
    assert est.half_width == pytest.approx(0.0, abs=1e-9)
    at_11 = steady_estimate(ends, rule, end=0.375 + 11)
    assert at_11 is not None and at_11.steps[1] == 29 and not at_11.converged
    # the decision does not depend on what happens after it (live check == final score)
    cut = [[t for t in e if t <= est.end + 0.5] for e in ends]
    assert steady_stop(cut, rule) == est
    # before the data reach the deciding window, nothing is decided yet
    assert steady_stop([[t for t in e if t <= 12.0] for e in ends], rule) is None
    # a rule with min_s holds no earlier than that much window (a join capture
    # takes its whole window: min_s = max_s)
    held = steady_stop(ends, dataclasses.replace(rule, min_s=20.0))
    assert held is not None and held.converged and held.end == 0.375 + 20
    whole = steady_stop(ends, dataclasses.replace(rule, min_s=40.0, max_s=40.0))
    assert whole is not None and whole.converged and whole.end == 0.375 + 40


def bursty(cycles: int) -> list[float]:
    """Ten 0.1 s steps, then one 3 s step, repeated: a 4 s cycle of 11 steps."""
    t, out = 0.0, []
    for _ in range(cycles):
        for _ in range(10):
            t += 0.1
            out.append(round(t, 9))
        t += 3.0
        out.append(round(t, 9))
    return out


def test_a_bursty_series_does_not_converge_within_the_bound():
    # 10 batches of a 20 s window are 2 s long: each holds either most of a
    # burst of ten quick steps or mostly the 3 s step, so the batch rates swing
    # between about 0.33 and 5 steps/s and the half-width stays far above 3 %.
    ends = [bursty(20)]
    rule = SteadyRule(warmup_steps=1, settle_s=0.0, min_steps=5, max_s=20.0, check_every_s=1.0)
    est = steady_stop(ends, rule)
    assert est is not None and not est.converged
    assert est.end == pytest.approx(est.start + 20.0)
    assert est.rel_half_width > 0.1
    assert max(est.batch_steps_per_s) > 3 * min(est.batch_steps_per_s)
    # with a bound beyond the data (32 s), no decision yet: the run would go on
    assert steady_stop([bursty(8)], dataclasses.replace(rule, max_s=200.0)) is None
    # the same cycle measured long enough, in batches of whole cycles, converges
    long = dataclasses.replace(rule, max_s=2000.0, batches=10, check_every_s=40.0)
    done = steady_stop([bursty(600)], long)
    assert done is not None and done.converged
    assert done.steps_per_s == pytest.approx(11 / 4.0, rel=0.03)


def test_rule_rejects_bad_parameters():
    for bad in (
        {"batches": 1},
        {"confidence": 1.0},
        {"rel_half_width": 0},
        {"warmup_steps": 0},
        {"min_s": -1.0},
        {"min_s": 301.0},  # over max_s
    ):
        with pytest.raises(ValueError, match="SteadyRule needs"):
            SteadyRule(**bad)  # type: ignore[arg-type]


def test_phase_distance_of_regimes_by_hand():
    from sgdsim.protocol import phase_distance

    step = 2.0
    ends = [k * step for k in range(-2, 30)]
    # two workers in phase, 0.1 s apart: 0.05 of a step
    assert phase_distance([ends, [t + 0.1 for t in ends]], 40.0) == pytest.approx(0.05)
    # alternating: half a step apart
    assert phase_distance([ends, [t + 1.0 for t in ends]], 40.0) == pytest.approx(0.5)
    # four workers taking turns: the nearest other is a quarter step away
    four = [[t + k * step / 4 for t in ends] for k in range(4)]
    assert phase_distance(four, 40.0) == pytest.approx(0.25)
    # three in phase and one opposite: most step ends have a neighbour at 0
    lumped = [ends, ends, ends, [t + 1.0 for t in ends]]
    assert phase_distance(lumped, 40.0) == pytest.approx(0.0)
    assert phase_distance([ends], 40.0) is None  # one worker: no phase
    assert phase_distance([[-3.0, -1.0], [-2.0, -0.5]], 40.0) is None  # no step inside


def test_phase_spread_tells_one_group_from_groups_that_take_turns_by_hand():
    from sgdsim.protocol import phase_distance, phase_spread

    step = 2.0
    ends = [k * step for k in range(-2, 30)]
    # four in one group, 0.1 s apart in turn: the farthest is 0.3 s, 0.15 of a step
    group = [[t + 0.1 * k for t in ends] for k in range(4)]
    assert phase_distance(group, 40.0) == pytest.approx(0.05)
    assert phase_spread(group, 40.0) == pytest.approx(0.15)
    # two pairs taking turns: each has a partner at 0 and the other pair half a step away
    pairs = [ends, ends, [t + 1.0 for t in ends], [t + 1.0 for t in ends]]
    assert (phase_distance(pairs, 40.0), phase_spread(pairs, 40.0)) == pytest.approx((0.0, 0.5))
    # evenly spread: the nearest a quarter away, the farthest half a step
    four = [[t + k * step / 4 for t in ends] for k in range(4)]
    assert (phase_distance(four, 40.0), phase_spread(four, 40.0)) == pytest.approx((0.25, 0.5))
    # two workers: the nearest other is the farthest
    pair = [ends, [t + 0.6 for t in ends]]
    assert phase_spread(pair, 40.0) == pytest.approx(phase_distance(pair, 40.0))
    assert phase_spread([ends], 40.0) is None
    assert phase_spread([[-3.0, -1.0], [-2.0, -0.5]], 40.0) is None  # no step inside


def test_phase_distance_counts_only_the_window_and_folds_unequal_steps():
    from sgdsim.protocol import phase_distance

    a = [float(t) for t in range(-20, 11)]  # 1 s steps
    # b in phase for 20 steps before the window, half a step off in its 10 s
    b = [float(t) for t in range(-20, 0)] + [t + 0.5 for t in range(0, 11)]
    assert phase_distance([a, b], 10.0) == pytest.approx(0.5)
    # a worker with steps twice as long, ending 0.2 s after the other's: 0.1 of its step
    slow = [2 * t + 0.2 for t in range(-2, 6)]
    d = phase_distance([a, slow], 10.0)
    assert d is not None and 0.0 < d <= 0.2


def test_phase_profile_splits_a_pairs_time_and_rate_by_phase():
    from sgdsim.protocol import PHASE_BINS, phase_profile

    # launch 1: 2 s steps 0.1 s apart (phase 0.05) over 40 s: worker a ends 0 … 40
    # (21 steps inside), b 0.1 … 38.1 (20): 82 s of stepping at 2 × 41 / 82 = 1 step/s
    a1 = [2.0 * k for k in range(-2, 21)]
    in_phase = ([a1, [t + 0.1 for t in a1]], 40.0)
    # launch 2: 1 s steps half a step apart (phase 0.5) over 20 s: 21 + 20 steps, 41 s
    a2 = [float(k) for k in range(-2, 21)]
    alternating = ([a2, [t + 0.5 for t in a2]], 20.0)
    got = phase_profile([in_phase, alternating])
    assert got is not None
    shares, rates = got
    assert len(shares) == len(rates) == PHASE_BINS
    assert shares == pytest.approx((82 / 123, 0, 0, 0, 41 / 123))
    assert rates[0] == pytest.approx(1.0) and rates[4] == pytest.approx(2.0)
    assert rates[1:4] == (None, None, None)
    # the shares weight the rates into the pooled rate: 2 × 82 steps / 123 s
    assert sum(s * (r or 0) for s, r in zip(shares, rates, strict=True)) == pytest.approx(
        2 * 82 / 123
    )
    # one launch alone keeps only its bin; the window drops steps after it
    only = phase_profile([alternating])
    assert only is not None and only[0] == pytest.approx((0, 0, 0, 0, 1))
    short = phase_profile([([a2, [t + 0.5 for t in a2]], 9.75)])
    assert short is not None and short[1][4] == pytest.approx(2.0)
    assert phase_profile([([a1], 40.0)]) is None  # one worker: no phase
    assert phase_profile([([[-3.0, -1.0], [-2.0, -0.5]], 40.0)]) is None  # nothing inside


def test_describe_window_names_the_interval_and_whether_the_rule_held():
    assert describe_window("steady", True, 0.021, 41.0) == "± 2.1 % after 41 s"
    assert describe_window("steady", False, 0.074, 300.0) == "± 7.4 %, cut at 300 s"
    # fixed-step rows, and rows of a store written before the columns, say nothing
    assert describe_window("steps", None, None, None) == ""
    assert describe_window(None, None, None, None) == ""
    assert describe_window("steady", True, None, 41.0) == ""
