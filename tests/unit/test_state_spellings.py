"""One spelling shown, every spelling accepted, and
the listing note that shows a dead-letter reason once."""

from __future__ import annotations

import pytest

from sepp.cli.admin_views import reason_note
from sepp.client.admin import state_number
from sepp.domain.states import STATE_NAMES, parse_state, state_label


@pytest.mark.parametrize("text", ["dead_lettered", "DEAD_LETTERED", "dead-lettered", "Dead lettered",
                                  " Dead-Lettered ", "dead__lettered", "5"])
def test_every_spelling_of_dead_lettered_parses(text: str) -> None:
    assert parse_state(text) == 5
    assert state_number(text) == 5


@pytest.mark.parametrize("text", ["deadlettered", "dead", "", "0", "8", "ready!", "READY READY"])
def test_anything_else_is_an_error_naming_the_states(text: str) -> None:
    with pytest.raises(ValueError,
                       match="one of SCHEDULED, READY, RESERVED, COMPLETED, DEAD_LETTERED, CANCELLED, DEFERRED"):
        parse_state(text)


def test_every_state_is_shown_as_its_api_name() -> None:
    assert [state_label(n) for n in sorted(STATE_NAMES)] == ["SCHEDULED", "READY", "RESERVED", "COMPLETED",
                                                             "DEAD_LETTERED", "CANCELLED", "DEFERRED"]
    assert state_label(99) == "99"


@pytest.mark.parametrize(("reason", "error", "note"), [
    ("NACK_DEAD_LETTER: no handler registered", "no handler registered", "NACK_DEAD_LETTER: no handler registered"),
    ("ATTEMPTS_EXHAUSTED", "KeyError: 'x'", "ATTEMPTS_EXHAUSTED / KeyError: 'x'"),
    ("", "boom", "boom"),
    ("LEASE_EXPIRED", "", "LEASE_EXPIRED"),
    ("", "", ""),
])
def test_a_reason_that_quotes_the_error_is_not_repeated(reason: str, error: str, note: str) -> None:
    assert reason_note(reason, error) == note
