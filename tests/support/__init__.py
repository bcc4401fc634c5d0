"""Helpers shared by the tests: one place for stubs, failure decoding,
waiting and the server fixtures. Importable as ``support`` (``pythonpath = ["tests"]``).

* ``servers``  — ``ServerFactory``, the ``FAST`` test config, the ``server_factory`` /
  ``server`` fixtures (registered by tests/conftest.py).
* ``stubs``    — ``StubSet``, the one stub wrapper: a channel with the producer, worker and
  admin stubs and the call metadata; the verbs below build on it.
* ``failures`` — ``failure_of``, the one decoder of a failed call (status, ErrorInfo
  reason and metadata, every rich detail), and ``fails`` / ``code_reason`` around it.
* ``waiting``  — ``wait_for``, the one poll-with-deadline.
* ``interrupting`` — ``with_default_sigint``: a child a test Ctrl-Cs starts with SIGINT's default
  action, whatever the test run inherited (a background job ignores SIGINT).
* ``producer`` — request builders, ``Stubs`` for the wire-contract tests, rejection assertions.
* ``worker``   — ``Wire`` (enqueue / reserve / ack / nack / extend / settle) and job state
  read through the admin API.
* ``admin``    — ``AdminStubs`` (admin calls with the token, job factories, listings).
* ``browser``  — the Chromium fixtures and job factories of the UI tests.
* ``nodes``    — ``open_nodes``: several stores on one PostgreSQL schema (the multi-node tests).
* ``reservations`` — ``leased_record``: the plain leased job of the Reserve wire-answer tests.
"""
