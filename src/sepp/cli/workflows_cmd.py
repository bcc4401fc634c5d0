"""``sepp workflows …``: list the workflows newest first, show one (its jobs per state, its
failed nodes and why, its nodes and their edges) and cancel one whole, over ``AdminClient``
(docs/workflows.md "Seeing and steering a workflow").

Exit codes as ``sepp jobs`` (sepp.cli.jobs_cmd): 0 done; 1 declined at the confirmation; 2
refused by the server (WORKFLOW_NOT_FOUND, a malformed id) or bad input; 3 transport error.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from sepp.api.v1 import admin_pb2 as apb
from sepp.cli.admin_calls import admin_client, admin_out, print_admin_json
from sepp.cli.admin_views import STATE_ORDER, iso_time, reason_note
from sepp.cli.main import app
from sepp.cli.shell import DEFAULT_SERVER, JsonOpt, ServerOpt, TokenOpt, YesOpt, confirm, err_console, escape
from sepp.cli.shell import WaitTimeoutOpt as TimeoutOpt
from sepp.domain.states import state_label

workflows_app = typer.Typer(name="workflows", help="List, inspect and cancel workflows (EnqueueWorkflow).",
                            no_args_is_help=True)
app.add_typer(workflows_app)


def counts_json(c: apb.WorkflowStateCounts) -> dict[str, int]:
    """Jobs per state, every state named (lowercase, as ``sepp queues`` spells them)."""
    return {name: int(getattr(c, name)) for name in STATE_ORDER}


def counts_text(c: apb.WorkflowStateCounts) -> str:
    """The states that have jobs, ``COMPLETED 3, DEFERRED 2``; ``-`` for none."""
    parts = [f"{name.upper()} {getattr(c, name)}" for name in STATE_ORDER if getattr(c, name)]
    return ", ".join(parts) or "-"


def workflow_summary_json(s: apb.WorkflowSummary) -> dict[str, Any]:
    """One workflow of a listing as plain JSON (times RFC 3339 UTC)."""
    return {"workflow_id": s.workflow_id, "created_at": iso_time(s.created_at), "nodes": s.nodes,
            "counts": counts_json(s.counts), "terminal": s.terminal}


def node_json(n: apb.WorkflowNodeInfo, index: int) -> dict[str, Any]:
    """One node of ``sepp workflows show --json``."""
    return {"index": index, "job_id": n.job_id, "queue": n.queue, "job_type": n.job_type,
            "state": state_label(n.state), "after": list(n.after),
            "external_dependencies": list(n.external_dependencies), "reason": n.reason or None,
            "last_error": n.last_error or None, "cancel_requested": n.cancel_requested,
            "finished_at": iso_time(n.finished_at, n.HasField("finished_at"))}


@workflows_app.command("list")
def workflows_list(
    limit: Annotated[int, typer.Option("--limit", help="At most this many workflows (0 = all).")] = 50,
    page_token: Annotated[str, typer.Option("--page-token", help="Continue a listing (from --json output).")] = "",
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Workflows newest first: when created, how many nodes, their jobs per state, and whether
    every node has finished (terminal)."""
    rows: list[apb.WorkflowSummary] = []
    next_token = page_token
    with admin_client(server, token, timeout, as_json) as client:
        while True:
            want = 1000 if limit <= 0 else min(1000, limit - len(rows))
            page = client.list_workflows(page_size=want, page_token=next_token)
            rows.extend(page.workflows)
            next_token = page.next_page_token
            if not next_token or (limit > 0 and len(rows) >= limit):
                break
    if as_json:
        print_admin_json({"workflows": [workflow_summary_json(s) for s in rows],
                          "next_page_token": next_token or None})
        return
    if not rows:
        admin_out().print("No workflows.")
        return
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("workflow", no_wrap=True, min_width=36)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("nodes", justify="right")
    table.add_column("terminal")
    table.add_column("jobs per state", overflow="fold")
    for s in rows:
        table.add_row(s.workflow_id, (iso_time(s.created_at) or "").replace("T", " ").rstrip("Z"), str(s.nodes),
                      "yes" if s.terminal else "no", counts_text(s.counts))
    admin_out().print(table)
    if next_token:
        err_console().print(f"more workflows follow: --page-token {next_token}")


@workflows_app.command("show")
def workflows_show(
    workflow_id: Annotated[str, typer.Argument(help="Workflow id (EnqueueWorkflow's answer).")],
    nodes: Annotated[int, typer.Option("--nodes", help="Show at most this many nodes in the node table "
                                                       "(0 = none; --json lists them all).")] = 100,
    server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """One workflow: its jobs per state, the failed nodes (DEAD_LETTERED or CANCELLED) and why,
    and its nodes in node order with the nodes each runs after."""
    with admin_client(server, token, timeout, as_json) as client:
        info = client.get_workflow(workflow_id)
    if as_json:
        print_admin_json({**workflow_summary_json(info.summary), "failed": list(info.failed),
                          "nodes": [node_json(n, i) for i, n in enumerate(info.nodes)]})
        return
    out = admin_out()
    s = info.summary
    out.print(f"workflow {s.workflow_id}  {'terminal' if s.terminal else 'running'}  {s.nodes} node(s), "
              f"created {iso_time(s.created_at)}", markup=False, highlight=False)
    out.print(f"jobs per state: {counts_text(s.counts)}", markup=False, highlight=False)
    if info.failed:
        failed = Table(box=box.SIMPLE_HEAD, title="failed nodes", title_justify="left")
        for col in ("#", "job", "type", "state", "reason / last error"):
            failed.add_column(col, overflow="fold" if col.startswith("reason") else "ellipsis")
        for i in info.failed:
            n = info.nodes[i]
            failed.add_row(str(i), n.job_id, escape(n.job_type), state_label(n.state),
                           escape(reason_note(n.reason, n.last_error)[:200]))
        out.print(failed)
    if nodes > 0:
        table = Table(box=box.SIMPLE_HEAD, title="nodes", title_justify="left")
        for col in ("#", "job", "queue", "type", "state", "after"):
            table.add_column(col)
        for i, n in enumerate(info.nodes[:nodes]):
            state = state_label(n.state) + (" (cancel requested)" if n.cancel_requested else "")
            table.add_row(str(i), n.job_id, escape(n.queue), escape(n.job_type), state,
                          " ".join(str(a) for a in n.after))
        out.print(table)
        if len(info.nodes) > nodes:
            err_console().print(f"{len(info.nodes) - nodes} more node(s): --nodes 0 for none, --json for all")


@workflows_app.command("cancel")
def workflows_cancel(
    workflow_id: Annotated[str, typer.Argument(help="Workflow id.")],
    reason: Annotated[str, typer.Option("--reason", help="Kept as each cancelled node's reason.")] = "",
    yes: YesOpt = False, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Cancel every node of a workflow that has not finished, in one commit: SCHEDULED, READY and
    DEFERRED ones at once; RESERVED ones are asked to stop (the worker learns it on its next
    lease extension). Finished nodes are left as they are."""
    confirm(f"Cancel workflow {workflow_id}?", yes, as_json)
    with admin_client(server, token, timeout, as_json) as client:
        done = client.cancel_workflow(workflow_id, reason)
    if as_json:
        print_admin_json({"workflow_id": done.summary.workflow_id, "cancelled": done.cancelled,
                          "cancel_requested": done.cancel_requested, **{
                              k: v for k, v in workflow_summary_json(done.summary).items() if k != "workflow_id"}})
        return
    admin_out().print(f"{done.summary.workflow_id}: {done.cancelled} node(s) cancelled, {done.cancel_requested} "
                      f"running node(s) asked to stop; jobs per state: {counts_text(done.summary.counts)}",
                      markup=False, highlight=False)
