"""``sepp jobs …``: list (filters, ``--where``, pages), show, cancel, requeue (one job, or a
bulk redrive of a queue's dead letters) and delete jobs, over ``AdminClient``; ``result``
(``jobs_result``: a job's outcome, waited for with the producer client).

Exit codes as ``sepp queues`` (sepp.cli.queues_cmd): 0 done; 1 declined at the
confirmation; 2 refused by the server or bad input; 3 transport error.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, TypeVar

import typer

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.cli.admin_calls import admin_client, admin_fail, admin_out, fail_flag, print_admin_json
from sepp.cli.admin_views import job_json, print_job, summary_json, summary_table
from sepp.cli.flags import FlagValueError, parse_where
from sepp.cli.jobs_result import jobs_result
from sepp.cli.main import app
from sepp.cli.shell import DEFAULT_SERVER, JsonOpt, ServerOpt, TokenOpt, YesOpt, confirm, err_console, parse_moment
from sepp.cli.shell import WaitTimeoutOpt as TimeoutOpt
from sepp.cli.watch_cmd import jobs_watch
from sepp.client.admin import state_number
from sepp.domain.states import state_label

jobs_app = typer.Typer(name="jobs", help="List, inspect, wait for, cancel, requeue (redrive) and delete jobs.",
                       no_args_is_help=True)
app.add_typer(jobs_app)

T = TypeVar("T")


@jobs_app.command("list")
def jobs_list(
    queue: Annotated[str, typer.Option("--queue", "-q", help="Only this queue.")] = "",
    state: Annotated[str, typer.Option("--state", help="Only this state (ready, dead_lettered, …).")] = "",
    job_type: Annotated[str, typer.Option("--type", help="Only this job type.")] = "",
    reason: Annotated[str, typer.Option("--reason", help="Reason prefix (finished jobs).")] = "",
    where: Annotated[list[str] | None, typer.Option(
        "--where", metavar="KEY=VALUE",
        help="Only jobs whose custom map has KEY = VALUE (the value compared as text: user_id=42 finds the int "
             "42 and the string \"42\"). Repeat for AND; ANDed with every other filter too.")] = None,
    error: Annotated[str, typer.Option("--error", help="Text in the last error message (A-Z = a-z).")] = "",
    key: Annotated[str, typer.Option("--key", help="Only the job of this idempotency key (with --queue: "
                                                   "in that queue).")] = "",
    limit: Annotated[int, typer.Option("--limit", help="At most this many jobs (0 = all).")] = 50,
    page_token: Annotated[str, typer.Option("--page-token", help="Continue a listing (from --json output).")] = "",
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Jobs by queue, state and type, keyset-paginated (a job that keeps its state is listed once).

    Search (docs/operations.md "Search"): --where, --error and --key narrow the listing; every
    filter given must hold. A search by --where or --key lists in enqueue order.
    """
    try:
        state_number(state)
        terms = parse_where(where or [])
    except FlagValueError as exc:
        fail_flag(exc, as_json)
    except ValueError as exc:
        admin_fail(str(exc), as_json)
    rows: list[apb.JobSummary] = []
    next_token = page_token
    with admin_client(server, token, timeout, as_json) as client, err_console().status("listing…") as status:
        while True:
            want = 1000 if limit == 0 else min(1000, limit - len(rows))
            page = client.list_jobs(queue=queue, state=state or None, job_type=job_type, reason_prefix=reason,
                                    page_size=want, page_token=next_token, idempotency_key=key,
                                    error_contains=error, where=terms)
            rows.extend(page.jobs)
            next_token = page.next_page_token
            status.update(f"listing… {len(rows):,} job(s)")
            if not next_token or (limit and len(rows) >= limit):
                break
    if as_json:
        print_admin_json({"jobs": [summary_json(s) for s in rows], "next_page_token": next_token or None})
        return
    if not rows:
        admin_out().print("No jobs match.")
        for where_key, value in terms:  # the search box's spelling, taken as a key of its own
            if where_key.startswith("custom.") and len(where_key) > len("custom."):
                err_console().print(f"note: --where takes the custom-map key itself: --where "
                                    f"{where_key.removeprefix('custom.')}={value}, not {where_key}={value} "
                                    f"(custom. is the UI search box's spelling)", markup=False, highlight=False)
        return
    admin_out().print(summary_table(rows))
    if next_token:
        err_console().print(f"more jobs follow: --page-token {next_token}")


@jobs_app.command("show")
def jobs_show(
    job_id: Annotated[str | None, typer.Argument(help="Job id (or use --queue with --key).")] = None,
    queue: Annotated[str, typer.Option("--queue", "-q", help="Queue of the idempotency key.")] = "",
    key: Annotated[str, typer.Option("--key", help="Find the job by its idempotency key.")] = "",
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Every field of one job: payload, result (when it has one), custom map, attempt history."""
    if not job_id and not (queue and key):
        admin_fail("give a job id, or --queue and --key", as_json)
    with admin_client(server, token, timeout, as_json) as client:
        if job_id:
            job = client.get_job(job_id)
        else:
            found = client.find_job_by_key(queue, key)
            if not found.HasField("job"):
                admin_fail(f"key {key!r} points at job {found.job_id}, which was deleted", as_json,
                      job_id=found.job_id)
            job = found.job
    if as_json:
        print_admin_json(job_json(job))
        return
    print_job(job)


def _run_each(job_ids: list[str], action: Callable[[str], T]) -> list[T]:
    return [action(job_id) for job_id in job_ids]


@jobs_app.command("cancel")
def jobs_cancel(
    job_ids: Annotated[list[str], typer.Argument(help="Job id(s).")],
    reason: Annotated[str, typer.Option("--reason", help="Kept as the job's reason.")] = "",
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Cancel jobs: SCHEDULED/READY at once; RESERVED ones are asked to stop (via ExtendLease)."""
    confirm(f"Cancel {len(job_ids)} job(s)?", yes, as_json)
    with admin_client(server, token, timeout, as_json) as client:
        jobs = _run_each(job_ids, lambda i: client.cancel_job(i, reason))
    if as_json:
        print_admin_json([{"id": j.id, "state": state_label(j.state), "cancel_requested": j.cancel_requested}
                     for j in jobs])
        return
    for j in jobs:
        what = "cancel requested (the worker learns it on its next lease extension)" \
            if j.state == pb.RESERVED else state_label(j.state)
        admin_out().print(f"{j.id}: {what}")


@jobs_app.command("requeue")
def jobs_requeue(
    job_ids: Annotated[list[str] | None, typer.Argument(help="Job id(s) to redrive (DEAD_LETTERED or "
                                                           "CANCELLED). Omit them to redrive by filter.")] = None,
    all_dead: Annotated[bool, typer.Option("--all-dead", help="Redrive every dead letter matching the "
                                                              "filters below.")] = False,
    queue: Annotated[str, typer.Option("--queue", "-q", help="Filter: queue.")] = "",
    job_type: Annotated[str, typer.Option("--type", help="Filter: job type.")] = "",
    reason: Annotated[str, typer.Option("--reason", help="Filter: reason prefix, e.g. ATTEMPTS_EXHAUSTED.")] = "",
    after: Annotated[str, typer.Option("--after", help="Filter: dead-lettered at or after (RFC 3339, or a "
                                                       "duration ago such as 2h).")] = "",
    before: Annotated[str, typer.Option("--before", help="Filter: dead-lettered before (same forms).")] = "",
    max_jobs: Annotated[int, typer.Option("--max", help="Redrive at most this many (0 = all).")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count the matching dead letters.")] = False,
    without_dependents: Annotated[bool, typer.Option(
        "--without-dependents", help="Leave the jobs cancelled because these failed (their dependents) "
                                     "cancelled; by default they wait again.")] = False,
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Redrive jobs: READY again with attempt 0 (DEFERRED if still waiting for dependencies); id,
    payload, custom map, priority and history kept. The jobs cancelled because one of them
    failed (its dependents) wait again unless --without-dependents."""
    if job_ids and all_dead:
        admin_fail("give job ids or --all-dead, not both", as_json)
    if not job_ids and not all_dead:
        admin_fail("give job ids, or --all-dead with filters", as_json)
    with admin_client(server, token, timeout, as_json) as client:
        if job_ids:
            jobs = _run_each(job_ids, partial(client.requeue_job, without_dependents=without_dependents))
            if as_json:
                print_admin_json([{"id": j.id, "state": state_label(j.state), "attempt": j.attempt} for j in jobs])
            else:
                for j in jobs:
                    admin_out().print(f"{j.id}: requeued ({state_label(j.state)}, attempt {j.attempt})")
            return
        try:
            since = parse_moment(after, "--after") if after else None
            until = parse_moment(before, "--before") if before else None
        except FlagValueError as exc:
            fail_flag(exc, as_json)
        kw: dict[str, Any] = {"queue": queue, "job_type": job_type, "reason_prefix": reason, "after": since,
                              "before": until}
        matched, _ = client.requeue_dead_lettered(**kw, dry_run=True)
        if dry_run or matched == 0:
            if as_json:
                print_admin_json({"matched": matched, "requeued": 0, "dry_run": dry_run})
            else:
                admin_out().print(f"{matched:,} dead-lettered job(s) match" + (" (dry run)" if dry_run else ""))
            return
        goal = matched if not max_jobs else min(max_jobs, matched)
        confirm(f"Requeue {goal:,} of {matched:,} matching dead-lettered job(s)?", yes, as_json)
        with err_console().status(f"requeueing {goal:,} job(s)…"):
            matched, requeued = client.requeue_dead_lettered(**kw, max_jobs=max_jobs,
                                                             without_dependents=without_dependents)
    if as_json:
        print_admin_json({"matched": matched, "requeued": requeued, "dry_run": False})
    else:
        admin_out().print(f"requeued {requeued:,} of {matched:,} matching dead-lettered job(s)")


@jobs_app.command("delete")
def jobs_delete(
    job_ids: Annotated[list[str], typer.Argument(help="Job id(s).")],
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Delete jobs for good (any state; their idempotency keys stay claimed until they expire)."""
    confirm(f"Delete {len(job_ids)} job(s) for good?", yes, as_json)
    with admin_client(server, token, timeout, as_json) as client:
        _run_each(job_ids, client.delete_job)
    if as_json:
        print_admin_json({"deleted": job_ids})
    else:
        for job_id in job_ids:
            admin_out().print(f"{job_id}: deleted")


# ``sepp jobs result``: its own module (the producer client's wait), registered last.
jobs_app.command("result")(jobs_result)
jobs_app.command("watch")(jobs_watch)
