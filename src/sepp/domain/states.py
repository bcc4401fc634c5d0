"""Job states and their one name table.

The numbers match ``sepp.api.v1.JobState`` and the stored ``state`` column. Every front
end (UI, CLI, admin client, worker runtime) names states through ``STATE_NAMES`` /
``state_name``, so a state has one spelling everywhere.
"""

from __future__ import annotations

import enum


class State(enum.IntEnum):
    """Job states; the numbers match ``sepp.api.v1.JobState`` and the schema."""

    SCHEDULED = 1
    READY = 2
    RESERVED = 3
    COMPLETED = 4
    DEAD_LETTERED = 5
    CANCELLED = 6
    #: Waiting for the jobs it depends on to complete (docs/workflows.md).
    DEFERRED = 7


#: States a job never leaves on its own (retention applies).
FINISHED = (State.COMPLETED, State.DEAD_LETTERED, State.CANCELLED)

#: State number → its lowercase name, as the UI, the CLI and JSON output spell it.
STATE_NAMES: dict[int, str] = {int(s): s.name.lower() for s in State}

#: Lowercase name → state number (the inverse of ``STATE_NAMES``).
STATE_BY_NAME: dict[str, int] = {name: value for value, name in STATE_NAMES.items()}


def state_name(state: int) -> str:
    """The lowercase name of a state number (``"dead_lettered"``); an unknown number (a
    damaged row, a newer server) reads as its decimal text rather than raising."""
    return STATE_NAMES.get(state, str(state))


def state_label(state: int) -> str:
    """The one spelling a state is *shown* in: the API's enum name in capitals —
    ``DEAD_LETTERED`` — in the UI, the CLI's tables and its JSON alike. An unknown number (a
    damaged row, a newer server) reads as its decimal text."""
    name = STATE_NAMES.get(state)
    return str(state) if name is None else name.upper()


def parse_state(text: str) -> int:
    """A state given in any of the spellings people type (``DEAD_LETTERED``,
    ``dead_lettered``, ``dead-lettered``, ``Dead lettered``, or its number) → its number.

    Case, ``-``, ``_`` and spaces do not matter. Raises ``ValueError`` naming the valid
    states for anything else (an unknown state is an error, never silently READY).
    """
    key = "_".join(text.strip().lower().replace("-", " ").replace("_", " ").split())
    if key in STATE_BY_NAME:
        return STATE_BY_NAME[key]
    if key.isascii() and key.isdigit() and int(key) in STATE_NAMES:
        return int(key)
    raise ValueError(f"unknown job state {text!r}: one of {', '.join(s.upper() for s in STATE_BY_NAME)}")
