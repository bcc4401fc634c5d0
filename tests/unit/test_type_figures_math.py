"""The run-time buckets and percentiles of the job-type figures: a bucket's
value is within ALPHA of every run time in it, at the bucket bounds and one past them; the
percentile read from the buckets is the nearest-rank one within ALPHA, clamped to the max."""

from __future__ import annotations

import math
import random

from sepp.server.admin.type_figures import ALPHA, GAMMA, bucket_of, bucket_value, quantile


def test_a_bucket_holds_the_runs_between_its_bounds_and_stands_for_them_within_alpha() -> None:
    for i in (1, 2, 10, 100, 300, 436):
        upper = GAMMA ** i
        assert bucket_of(upper * (1 - 1e-12)) == i           # the upper bound is in the bucket
        assert bucket_of(upper * (1 + 1e-9)) == i + 1         # one past it is in the next
        for us in (GAMMA ** (i - 1) * (1 + 1e-9), upper):
            assert abs(bucket_value(bucket_of(us)) - us) <= ALPHA * us * (1 + 1e-9)
    assert bucket_of(0) == bucket_of(1) == 0 and bucket_value(0) == 0.0
    assert bucket_of(1.0001) == 1


def test_percentiles_from_buckets_are_the_nearest_rank_ones_within_alpha() -> None:
    rng = random.Random(13)
    for _ in range(200):
        runs = [int(rng.lognormvariate(10, 2)) + 1 for _ in range(rng.randint(1, 400))]
        buckets: dict[int, int] = {}
        for us in runs:
            buckets[bucket_of(us)] = buckets.get(bucket_of(us), 0) + 1
        ordered = sorted(runs)
        for q in (0.5, 0.95, 1.0):
            exact = ordered[max(1, math.ceil(q * len(runs))) - 1]
            got = quantile(buckets, q, max(runs))
            assert got is not None and abs(got - exact) <= ALPHA * exact + 1e-6, (q, got, exact)
        assert (quantile(buckets, 1.0, max(runs)) or 0) <= max(runs)


def test_no_runs_no_percentile() -> None:
    assert quantile({}, 0.5, 0) is None
    assert quantile({3: 0}, 0.5, 0) is None
