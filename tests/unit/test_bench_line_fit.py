"""The LLM section's per-node figure: a least-squares line T(N) = a + b·N, read as SAM's harness reads its own."""

from __future__ import annotations

import math

import pytest
from bench.llm_node import line_fit


def test_points_on_a_line_give_its_intercept_and_slope() -> None:
    a, b = line_fit({1: 7.0, 3: 13.0, 10: 34.0})  # T = 4 + 3·N
    assert a == pytest.approx(4.0)
    assert b == pytest.approx(3.0)


def test_scattered_points_give_the_least_squares_line() -> None:
    # residuals of the least-squares line sum to zero and are uncorrelated with N
    points = {1: 70.6, 3: 293.1, 10: 1421.0}
    a, b = line_fit(points)
    residuals = {n: t - (a + b * n) for n, t in points.items()}
    assert sum(residuals.values()) == pytest.approx(0.0, abs=1e-9)
    assert sum(n * r for n, r in residuals.items()) == pytest.approx(0.0, abs=1e-9)


def test_fewer_than_two_sizes_give_no_line() -> None:
    a, b = line_fit({3: 12.0})
    assert math.isnan(a)
    assert math.isnan(b)
