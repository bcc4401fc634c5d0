"""The ``sepp`` command line (SPEC §4): serve, enqueue, info, queues, jobs, worker."""
