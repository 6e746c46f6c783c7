"""A judge's mean grade from its grades' counts (``report.judged.mean_of_counts``) is the float
``t_mean`` gives of the same grades listed one by one: generated grades of any sign and size,
repeated any number of times, in any order."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_echo_bench.report.judged import mean_of_counts, t_mean

SETTINGS = settings(max_examples=400, deadline=None, derandomize=True, database=None)
grades = st.one_of(st.integers(-10, 10), st.floats(-1e300, 1e300, allow_nan=False),
                   st.sampled_from([0.1, 1 / 3, 2.5, 7.0, -0.0, 5e-324, 1e308]))


@SETTINGS
@given(counts=st.dictionaries(grades, st.integers(1, 5000), max_size=12),
       seed=st.integers(0, 2**32))
def test_the_mean_of_counts_is_the_mean_of_the_grades_listed(counts: dict[float, int],
                                                             seed: int) -> None:
    listed = [grade for grade, times in counts.items() for _ in range(times)]
    random.Random(seed).shuffle(listed)  # the listed order is a panel's: any
    found = mean_of_counts(Counter(counts))
    assert found == t_mean(listed)[0]
    assert repr(found) == repr(t_mean(listed)[0])  # -0.0 and 0.0 told apart


def test_no_grade_has_no_mean() -> None:
    assert mean_of_counts(Counter()) is None
