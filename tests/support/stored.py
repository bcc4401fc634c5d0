"""What a server stored, read back through the admin API (for tests that compare it with what
a client reported)."""

from __future__ import annotations

from sepp.client.admin import AdminClient


def stored_by(target: str, queue: str, key: str) -> dict[int, str]:
    """Integer custom entry ``key`` → id of every job stored in ``queue``, all pages read.

    Fails the test (``AssertionError``) when two jobs carry the same value: each was enqueued
    once, so a repeated value is a job stored twice."""
    out: dict[int, str] = {}
    token = ""
    with AdminClient(target) as admin:
        while True:
            page = admin.list_jobs(queue=queue, page_size=1000, page_token=token)
            for summary in page.jobs:
                value = summary.job.custom[key].int_value
                assert value not in out, f"{key}={value} stored twice"
                out[value] = summary.job.id
            token = page.next_page_token
            if not token:
                return out
