"""The admin side of the server, split by duty:

* ``engine`` — ``AdminEngine``, the one handle over the parts below;
* ``jobs`` — ``JobAdmin``: read, list, cancel, requeue, redrive and delete jobs;
* ``queue_changes`` — ``QueueChanges``: declare, change, pause, purge and delete queues;
* ``stats`` — ``AdminStats``: the dashboards' reads and the counts in memory, flushed;
* ``bulk`` — ``BulkActions``: bulk cancel / requeue / delete over ``JobAdmin``;
* ``checks`` — ``StateConflict``, state names, the queue lookup and job-id parse;
* ``views`` — ``QueueStatsView`` and ``JobListing``, what the reads answer with;
* ``throughput`` — ``ThroughputCounter``, the in-memory per-minute counts;
* ``cursor`` — the ``ListJobs`` page-token codec;
* ``settings`` — ``merge_settings``, a settings patch applied to a queue's settings;
* ``workers`` — ``WorkerView``, the Workers page's view of the cluster;
* ``type_figures`` — ``TypeRollup`` and ``TypeFigures``, the job-type figures;
* ``workflows`` — ``WorkflowAdmin``: list, read and cancel workflows.

The names the front ends use are re-exported here (``from sepp.server.admin import AdminEngine``).
"""

from __future__ import annotations

from sepp.server.admin.checks import StateConflict, state_name
from sepp.server.admin.cursor import decode_cursor, encode_cursor
from sepp.server.admin.engine import AdminEngine
from sepp.server.admin.settings import merge_settings
from sepp.server.admin.throughput import ThroughputCounter
from sepp.server.admin.type_figures import TypeFigures, TypeRollup, WindowFigures
from sepp.server.admin.views import JobListing, QueueStatsView
from sepp.server.admin.workers import WorkerView

__all__ = ["AdminEngine", "JobListing", "QueueStatsView", "StateConflict", "ThroughputCounter", "TypeFigures",
           "TypeRollup", "WindowFigures", "WorkerView",
           "decode_cursor", "encode_cursor", "merge_settings", "state_name"]
