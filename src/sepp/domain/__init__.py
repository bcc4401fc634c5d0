"""The domain core: what a job and a queue are and what may happen to them, with no
transport and no database.

- ``states``: job states and their one name table.
- ``records``: the rows stored and read back (``JobRow``, ``JobRecord``, ``QueueRecord``).
- ``params``: the arguments and verdicts of store operations (reserve, settle, sweeps).
- ``policy``: a queue's retry and retention policy (backoff with jitter).
- ``transitions``: what an ack, a nack, a lease expiry, a cancel and a redrive do to a job
  (the ``Decision`` a driver applies under the lease guard; history entries, reasons).
- ``clock``: the one place the time is read (``Clock``; ``FakeClock`` for tests).
- ``ids``: job ids as 16 bytes and as canonical UUID text (``job_id_text``, ``job_id_bytes``).
- ``listing``: a job listing's ``JobQuery`` and ``JobPage``, and a redrive's ``DeadFilter``;
  ``admin``: what the admin's writes answer (``Outcome``) and its figures read (``StateCounts``,
  ``MinuteRow``, …) — shared by the store, the admin engine, the UI and the RPC edge.
- ``outcomes``: what a wait for jobs reads of each (``JobOutcome``: state, attempts, result).
- ``store_errors``: ``StoreError`` and its kinds, raised by a store and caught above it.

It imports nothing from ``sepp.storage``, ``sepp.server``, the front ends, grpc, protobuf
or any database module; the layer contracts in pyproject.toml hold it to that.
Times are integer microseconds since the Unix epoch (UTC) unless a name says otherwise.
"""
