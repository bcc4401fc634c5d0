"""Waiting on PostgreSQL's locks: until sessions wait for a given session (a lock held in
a test), read from ``pg_stat_activity`` rather than guessed with a sleep."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from support.backends import PG_TEST_DSN

#: Sessions waiting for session $1 or for one that waits for it.
_WAITING = """WITH w AS (SELECT pid, pg_blocking_pids(pid) AS b FROM pg_stat_activity)
SELECT count(*) FROM w WHERE $1 = ANY(b) OR b && ARRAY(SELECT pid FROM w WHERE $1 = ANY(b))"""


async def sessions_waiting_for(holder: asyncpg.Connection, n: int, within: float = 20.0) -> None:
    """Until ``n`` sessions wait for ``holder``'s session, or for one that waits for it
    (polled every 10 ms from a session of its own — inside a transaction pg_stat_activity
    is read once —, at most ``within`` seconds; ``AssertionError`` past it)."""
    pid = holder.get_server_pid()
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if await conn.fetchval(_WAITING, pid) >= n:
                return
            await asyncio.sleep(0.01)
    finally:
        await conn.close()
    raise AssertionError(f"fewer than {n} sessions waited for the held lock within {within:g} s")
