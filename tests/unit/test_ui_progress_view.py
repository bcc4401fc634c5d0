"""How the job page reads a job's progress (``views.progress_view``): a fraction as a
percentage, a done/total map as a percentage with its rows, a map as key/values, text as is,
anything else as compact JSON, and text that is not JSON as stored."""

from __future__ import annotations

import pytest

from sepp.server.http.ui.views import ProgressView, progress_view


@pytest.mark.parametrize(("stored", "kind", "text", "percent"), [
    ("0", "fraction", "0%", 0.0),
    ("0.425", "fraction", "42.5%", 42.5),
    ("1", "fraction", "100%", 100.0),
    ("1.5", "json", "1.5", None),        # one past a fraction: a plain number
    ("-0.1", "json", "-0.1", None),
    ("42", "json", "42", None),
    ("true", "json", "true", None),      # not a number, though Python's bool is an int
    ('"copying 3 of 9"', "text", "copying 3 of 9", None),
    ("[1, 2]", "json", "[1, 2]", None),
    ("null", "json", "null", None),
    ("not json {", "json", "not json {", None),
])
def test_scalars(stored: str, kind: str, text: str, percent: float | None) -> None:
    view = progress_view(stored)
    assert (view.kind, view.text, view.percent) == (kind, text, percent)


def test_a_map_is_key_values_in_the_handlers_order() -> None:
    assert progress_view('{"rows": 120, "stage": "load", "extra": {"a": 1}}') == ProgressView(
        "map", "", None, (("rows", "120"), ("stage", "load"), ("extra", '{"a": 1}')))


def test_a_map_with_done_and_total_is_also_a_percentage() -> None:
    view = progress_view('{"done": 30, "total": 120}')
    assert (view.kind, view.text, view.percent) == ("fraction", "25%", 25.0)
    assert view.rows == (("done", "30"), ("total", "120"))
    # done past total, or no positive total: only the rows
    assert progress_view('{"done": 121, "total": 120}').kind == "map"
    assert progress_view('{"done": 0, "total": 0}').kind == "map"
