"""Periodic jobs (docs/periodic.md), split by duty:

* ``spec`` — ``PeriodicSettings``: one ``[[periodic]]`` table / ``PeriodicSchedule``, checked;
* ``timetable`` — tick times in µs UTC (cronsim, DST) and the tick's idempotency key;
* ``jobs`` — the ``EnqueueRequest`` of one run;
* ``scheduler`` — ``PeriodicScheduler``: every node runs every schedule, one job per tick;
* ``admin`` — ``PeriodicAdmin``: list, declare, pause, resume, trigger, delete.
"""
