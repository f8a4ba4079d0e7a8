"""lneps.book.training.effects: the paired test, measured on synthetic data with a known effect and
a known null (false-positive rate, power, equivalence), against scipy's t where it is installed,
and its bad input."""

import math

import numpy as np
import pytest

from lneps.book.training import effects as E

TRIALS = 1000
N = 10  # seeds per comparison, as in the stored grid's claim slices


def _draws(delta, sd, rho=0.9, n=N, trials=TRIALS, seed=0):
    """Per trial, n paired (a, b) draws of unit-variance normals correlated at rho, b shifted by
    delta * sd_of_difference; returns (a, b) of shape (trials, n)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((trials, n))
    b = rho * a + math.sqrt(1 - rho**2) * rng.standard_normal((trials, n))
    sd_d = math.sqrt(2 * (1 - rho))
    return a * sd, (b + delta * sd_d) * sd


def _rate(delta, outcome, margin=1.0, sd=1.0, **kw):
    a, b = _draws(delta, sd, **kw)
    return np.mean([E.paired(x, y, margin=margin).outcome == outcome for x, y in zip(a, b)])


def _binomial_band(p, trials=TRIALS, z=4.0):
    h = z * math.sqrt(p * (1 - p) / trials)
    return p - h, p + h


def test_false_positive_rate_is_alpha_under_the_null():
    # the t-test is exact for normal differences: 5 % of nulls are called effects
    lo, hi = _binomial_band(E.ALPHA)
    rate = _rate(0.0, "effect")
    assert lo < rate < hi, rate


def test_power_at_one_sd_of_the_difference_is_the_noncentral_t():
    # n = 10, true mean difference one sd of the difference: power 0.803 (noncentral t, df 9)
    assert E.power(1.0, N) == pytest.approx(0.803, abs=0.001)
    lo, hi = _binomial_band(E.power(1.0, N))
    assert lo < _rate(1.0, "effect") < hi
    # and it grows with the effect: 2 sd is nearly always found
    assert _rate(2.0, "effect") > 0.99


def test_equivalence_is_at_most_alpha_at_the_margin_and_likely_well_inside_it():
    sd_d = math.sqrt(2 * (1 - 0.9))
    # the true difference sits on the margin: "equivalent" at most ALPHA of the time
    rate = _rate(1.0, "equivalent", margin=sd_d)
    assert rate < _binomial_band(E.ALPHA)[1], rate
    # a null with a margin of 1.5 sd of the difference: TOST's power at n = 10 is about 0.86
    assert _rate(0.0, "equivalent", margin=1.5 * sd_d) > 0.75


def test_a_small_true_difference_is_undecided_not_the_same():
    # half an sd of the difference, margin below it: neither effect nor equivalent most often
    sd_d = math.sqrt(2 * (1 - 0.9))
    assert _rate(0.5, "undecided", margin=0.4 * sd_d) > 0.5
    assert _rate(0.5, "equivalent", margin=0.4 * sd_d) < 0.01


def test_holm_keeps_the_familywise_error_rate():
    rng = np.random.default_rng(1)
    any_hit = 0
    for _ in range(400):
        cs = [E.paired(np.zeros(N), rng.standard_normal(N), margin=1e-9) for _ in range(5)]
        any_hit += any(c.is_effect for c in E.holm(cs))
    assert any_hit / 400 < _binomial_band(E.ALPHA, 400)[1]


def test_holm_adjusts_like_its_definition():
    cs = [
        E.paired([0] * 4, v, margin=1)
        for v in ([1, 1.2, 0.9, 1.1], [0, 0.1, -0.1, 0.05], [0.3, 0.5, 0.2, 0.4])
    ]
    ps = [c.p for c in cs]
    adj = [c.p_adjust for c in E.holm(cs)]
    order = np.argsort(ps)
    expect, run = [0.0] * 3, 0.0
    for k, i in enumerate(order):
        run = max(run, min(1, (3 - k) * ps[i]))
        expect[i] = run
    assert adj == pytest.approx(expect, rel=1e-12)


def test_t_distribution_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 9, 30):
        for p in (0.9, 0.95, 0.975, 0.995):
            assert E.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9)
        for t in (0.1, 1.0, 2.5, 7.0):
            assert E.t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9)


def test_ci_is_the_t_interval():
    d = np.array([0.3, 0.1, 0.4, 0.2, 0.25])
    c = E.paired(np.zeros(5), d, margin=1)
    h = E.t_quantile(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert c.ci() == pytest.approx((d.mean() - h, d.mean() + h), rel=1e-12)
    assert c.is_effect and c.worse_by == 5


def test_identical_runs_are_equivalent_and_dead_sides_are_effects_or_undecided():
    same = E.paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert same.outcome == "equivalent" and same.diff == 0 and same.ci() == (0.0, 0.0)
    dead = E.paired([1.0, 2.0, 3.0], [math.inf] * 3)
    assert dead.outcome == "effect" and dead.diff == math.inf
    mixed = E.paired([1.0, 2.0, 3.0], [math.inf, 2.0, 3.0])
    assert mixed.outcome == "undecided" and math.isnan(mixed.diff)


def test_below_min_draws_every_outcome_is_undecided():
    # a clear effect, a clear equivalence and a death, each on three draws: undecided with a
    # minimum of ten, as they were without it
    cases = [([0, 0, 0], [1.0, 1.1, 0.9]), ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]),
             ([1.0, 2.0, 3.0], [math.inf] * 3)]
    for a, b in cases:
        free, ruled = E.paired(a, b), E.paired(a, b, min_draws=E.MIN_DRAWS)
        assert free.outcome != "undecided" and ruled.outcome == "undecided"
        assert ruled.diff == free.diff and ruled.as_dict()["min_draws"] == E.MIN_DRAWS
    # Holm keeps the minimum; at ten draws it no longer applies
    (h,) = E.holm([E.paired([0, 0, 0], [1.0, 1.1, 0.9], min_draws=10)])
    assert h.min_draws == 10 and h.outcome == "undecided"
    ten = E.paired(np.zeros(10), np.linspace(0.9, 1.1, 10), min_draws=10)
    assert E.MIN_DRAWS == 10 and ten.outcome == "effect"


def test_the_floor_blocks_an_effect_smaller_than_it():
    c = E.paired(np.zeros(5), [1e-6, 1.1e-6, 0.9e-6, 1e-6, 1.05e-6], margin=1e-3, floor=1e-5)
    assert c.p < 1e-4 and c.outcome == "equivalent"


def test_bad_input():
    with pytest.raises(ValueError, match="equal, non-zero lengths"):
        E.paired([1, 2], [1])
    with pytest.raises(ValueError, match="margin must be positive"):
        E.paired([1, 2], [1, 2], margin=0)
    with pytest.raises(ValueError, match="p must lie"):
        E.t_quantile(0.2, 3)
    with pytest.raises(ValueError, match="df must be"):
        E.t_two_sided_p(1.0, 0)
    with pytest.raises(ValueError, match="metric must be one of"):
        E.compare([object()], [object()], "loss")


def test_death_share_ci_is_clopper_pearson():
    # the extremes in closed form: at 10 of 10 the share p with p^10 = 0.025 bounds it below
    assert E.death_share_ci(10, 10) == pytest.approx((0.025**0.1, 1.0), abs=1e-11)
    assert E.death_share_ci(0, 10) == pytest.approx((0.0, 1 - 0.025**0.1), abs=1e-11)
    # between them, the beta quantiles that define the interval
    stats = pytest.importorskip("scipy.stats")
    for k, n in ((1, 10), (3, 10), (5, 10), (9, 10), (2, 3)):
        lo, hi = E.death_share_ci(k, n)
        assert lo == pytest.approx(stats.beta.ppf(0.025, k, n - k + 1), abs=1e-10)
        assert hi == pytest.approx(stats.beta.ppf(0.975, k + 1, n - k), abs=1e-10)
    with pytest.raises(ValueError, match="0 <= dead <= n"):
        E.death_share_ci(11, 10)
    with pytest.raises(ValueError, match="level must lie"):
        E.death_share_ci(1, 10, level=1.0)


def test_the_module_examples_run():
    import doctest

    result = doctest.testmod(E)
    assert result.failed == 0 and result.attempted >= 8
