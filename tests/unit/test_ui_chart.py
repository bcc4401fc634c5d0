"""The throughput chart: an axis that reads correctly for small counts,
buckets for the 6 h and 24 h windows aligned on the current minute, enqueued drawn first (under
completed), and the window parameter."""

from __future__ import annotations

import pytest

from sepp.server.errors import InvalidRequest
from sepp.server.http.ui.chart import WINDOWS, axis_ceiling, bucket_rows, build_chart, window_param
from sepp.storage.admin import MinuteRow


@pytest.mark.parametrize(("peak", "ceiling"), [(0, 2), (1, 2), (2, 2), (3, 4), (5, 6), (6, 6), (7, 10), (10, 10),
                                               (11, 20), (41, 60), (61, 100), (101, 200), (999, 1000),
                                               (1001, 2000)])
def test_the_axis_top_is_nice_and_halves_to_a_whole_number(peak: int, ceiling: int) -> None:
    assert axis_ceiling(peak) == ceiling and ceiling % 2 == 0


def rows(values: list[int]) -> list[MinuteRow]:
    return [MinuteRow("q", 1000 + i, v, v, 0) for i, v in enumerate(values)]


def test_a_peak_of_one_is_labelled_2_1_0() -> None:
    chart = build_chart(rows([0] * 59 + [1]))
    assert chart.y_labels == ["2", "1", "0"]


def test_buckets_are_aligned_on_the_current_minute() -> None:
    assert bucket_rows(rows([1] * 7), 5) == [(2, 2, 0), (5, 5, 0)]
    assert bucket_rows(rows([1] * 10), 5) == [(5, 5, 0), (5, 5, 0)]
    assert bucket_rows(rows([1, 2, 3]), 1) == [(1, 1, 0), (2, 2, 0), (3, 3, 0)]
    assert bucket_rows([], 5) == []
    assert len(bucket_rows(rows([1] * 360), 5)) == 72 and len(bucket_rows(rows([1] * 1440), 20)) == 72


def test_each_window_draws_its_buckets_and_says_what_a_point_counts() -> None:
    for name, minutes, per, first_label in (("1h", 60, "per minute", "−60 min"),
                                            ("6h", 360, "per 5 minutes", "−6 h"),
                                            ("24h", 1440, "per 20 minutes", "−24 h")):
        window = WINDOWS[name]
        chart = build_chart(rows([3] * minutes), window)
        assert window.minutes == minutes and window.per == per
        assert chart.x_labels[0] == first_label and chart.x_labels[-1] == "now"
        assert chart.x_labels[2] == {"1h": "−30 min", "6h": "−3 h", "24h": "−12 h"}[name]
        cls, _, total, whole, tail = chart.series[0]
        assert cls == "enq" and total == 3 * minutes  # enqueued first: drawn under completed
        assert [s[0] for s in chart.series] == ["enq", "done", "dead"]
        assert len(whole.split()) == minutes // window.bucket - 1 and len(tail.split()) == 2


@pytest.mark.parametrize(("value", "name"), [(None, "1h"), ("", "1h"), ("6h", "6h"), ("24H", "24h")])
def test_the_window_parameter(value: str | None, name: str) -> None:
    assert window_param(value).name == name


def test_an_unknown_window_is_refused_naming_the_windows() -> None:
    with pytest.raises(InvalidRequest, match="one of 1h, 6h, 24h"):
        window_param("2d")
