"""Chords under ``kill -9`` of the server (of one node of two on PostgreSQL): a short run of
``support.workflow_chaos`` (its module doc lists the rules checked; the full 50 rounds are
``python benchmarks/workflow_chaos.py``, docs/workflows.md "Crashes"). Every callback
completes once, or is cancelled naming a failed child; none starts before its children
completed; nothing is left DEFERRED."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.workflow_chaos import FAILING_EVERY, run_chaos

pytestmark = pytest.mark.slow

#: Rounds, and chords of how many children: small, so a backend takes well under a minute on
#: a quiet machine (a server start and a restart per round dominate).
ROUNDS, CHORDS, CHILDREN = 2, 12, 20


def test_chords_survive_kill_9_of_a_server(backend: str, tmp_path: Path) -> None:
    """Two rounds of 12 chords of 20 children, one SIGKILL each: no rule breached; the
    planned failures (one child of every 4th chord) cancel their callbacks and only those."""
    results = run_chaos(backend, tmp_path, ROUNDS, chords=CHORDS, children=CHILDREN)
    problems = [f"round {i + 1}: {msg}" for i, r in enumerate(results) for msg in r.problems]
    assert not problems, problems[:10]
    planned = len(range(0, CHORDS, FAILING_EVERY))
    # 6 attempts: a planned retry and two lost leases leave every other child room to complete.
    assert sum(r.unplanned_dead for r in results) == 0
    assert sum(r.cancelled for r in results) == ROUNDS * planned
    assert sum(r.completed for r in results) == ROUNDS * (CHORDS - planned)
