"""The admin side of the server, split by duty:

* ``engine`` — ``AdminEngine`` (queues, jobs, redrive, stats), its views and ``StateConflict``;
* ``throughput`` — ``ThroughputCounter``, the in-memory per-minute counts;
* ``cursor`` — the ``ListJobs`` page-token codec;
* ``settings`` — ``merge_settings``, a settings patch applied to a queue's settings;
* ``workers`` — ``WorkerView``, the Workers page's view of the cluster;
* ``type_figures`` — ``TypeRollup`` and ``TypeFigures``, the job-type figures.

The names the front ends use are re-exported here (``from sepp.server.admin import AdminEngine``).
"""

from __future__ import annotations

from sepp.server.admin.cursor import decode_cursor, encode_cursor
from sepp.server.admin.engine import AdminEngine, JobListing, QueueStatsView, StateConflict, state_name
from sepp.server.admin.settings import merge_settings
from sepp.server.admin.throughput import ThroughputCounter
from sepp.server.admin.type_figures import TypeFigures, TypeRollup, WindowFigures
from sepp.server.admin.workers import WorkerView

__all__ = ["AdminEngine", "JobListing", "QueueStatsView", "StateConflict", "ThroughputCounter", "TypeFigures",
           "TypeRollup", "WindowFigures", "WorkerView",
           "decode_cursor", "encode_cursor", "merge_settings", "state_name"]
