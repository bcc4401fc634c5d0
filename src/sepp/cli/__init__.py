"""The ``sepp`` command line: serve, enqueue, info, queues, jobs, worker."""
