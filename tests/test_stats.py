"""The noise and fit checks: a constant series is never noisy, spread repeats are, one outlier
is not; a linear cost passes the fit check and a bent one fails it."""

from __future__ import annotations

from gpudissect.bench.stats import (
    fit_flag,
    fit_line,
    noise_flag,
    robust_halfwidth,
    slopes_per_repeat,
)


def test_constant_series_is_never_noisy() -> None:
    assert noise_flag([4.0] * 9) is None
    assert robust_halfwidth([4.0] * 9) == 0.0


def test_tight_series_is_clean_and_spread_series_is_noisy() -> None:
    assert noise_flag([4.00, 4.01, 3.99, 4.00, 4.02, 3.98]) is None
    flag = noise_flag([4.0, 5.0, 3.0, 4.5, 3.5, 6.0])
    assert flag is not None and flag.startswith("noisy:")


def test_one_outlier_does_not_make_a_value_noisy() -> None:
    assert noise_flag([4.0, 4.0, 4.01, 3.99, 4.0, 40.0]) is None


def test_linear_fit_passes_and_bent_fit_fails() -> None:
    xs = [32, 64, 128, 192]
    assert fit_flag(fit_line(xs, [20 + 4 * x for x in xs])) is None
    bent = fit_line(xs, [20 + 4 * x + 0.02 * x * x for x in xs])
    flag = fit_flag(bent)
    assert flag is not None and flag.startswith("poor-fit")


def test_slopes_per_repeat() -> None:
    xs = [8, 16]
    assert slopes_per_repeat(xs, [[40, 72], [41, 73], [10]]) == [4.0, 4.0]
