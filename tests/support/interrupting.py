"""Child processes a test interrupts with Ctrl-C (SIGINT), started as a user's shell starts them.

A process started with SIGINT ignored keeps ignoring it (Python installs its
``KeyboardInterrupt`` handler only over the default action, and ``sepp enqueue`` leaves an
ignored SIGINT alone, as every Unix program should: ``nohup``, ``cmd &``). A test run is
often started that way — a CI script's background job, ``nohup pytest`` — and every child it
starts inherits the ignored SIGINT: the test's Ctrl-C then does nothing, the child runs on
(exit 0 at the end of its input, or never), and the Ctrl-C tests fail or hang for a reason
that is no part of what they check. An interactive shell gives the command it runs the
default action; ``with_default_sigint(argv)`` does the same: ``argv`` runs through a
launcher that restores it and then ``exec``s ``argv`` (same pid, same descriptors).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: The launcher: ``python -c LAUNCHER PROGRAM ARG…`` restores SIGINT's default action and
#: becomes ``PROGRAM ARG…`` (an ``exec`` keeps the default action; an ignored one would stay).
LAUNCHER = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
            "os.execv(sys.argv[1], sys.argv[1:])")


def with_default_sigint(argv: Sequence[str]) -> list[str]:
    """``argv`` (an absolute program path first) as a command line that runs it with SIGINT's
    default action, whatever this process inherited (see the module docstring)."""
    return [sys.executable, "-c", LAUNCHER, *argv]
