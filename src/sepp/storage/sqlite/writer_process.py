"""The SQLite writer in a child process of its own (docs/decisions.md "The writer in its own
process").

Why: in one process the writer thread and the event loop share one interpreter lock. The
writer gives the lock up inside every SQLite call and must take it back afterwards, which
means waiting for whatever the event loop is running (measured: under end-to-end load the
writer spent about as long waiting for the lock as working). A child process has its own
interpreter: the writer never waits for the event loop, and the two use both cores.

Parent side: ``ProcessCommitter`` has ``Committer``'s interface (``start``, ``submit``,
``stop``, ``backlog``, ``commits``). ``submit(fn, weight)`` pickles ``fn`` — so ``fn`` must
be picklable: a module-level function, a ``functools.partial`` of one with picklable
arguments, or a ``MergeableInsert`` — and writes it to the child's stdin.

Child side (``python -m sepp.storage.sqlite.writer``, which calls ``child_main``): one thread
runs a ``GroupLoop`` (the same loop ``Committer`` runs in a thread) that reads and unpickles
the operations from stdin itself (``_Frames``), commits them in groups and writes every
group's results back on stdout.

Frames in both directions: an 8-byte big-endian length, then a pickle.

The settings (a JSON object) are the child's one command-line argument — or, for a child
started ahead of time by ``prespawn`` (argument ``-``), the first thing on its stdin: an
8-byte big-endian length, then the JSON. Such a child imports its modules meanwhile and
touches no file until its settings come (``ProcessCommitter.start`` sends them once the
data folder is locked); one whose stdin closes first exits at once.

* parent → child: ``(token, fn, weight, siblings)`` per operation (``siblings``: other
  operations in flight when it was submitted, for the group-commit wait);
  ``None`` asks the child to commit what it holds and exit.
* child → parent: ``("ready",)`` or ``("error", exception)`` once the connection is open
  (or failed to open); ``("results", commits, ops_committed, [(token, value, exception),
  ...], commit_stats)`` per group (``commit_stats``: the child's cumulative
  ``CommitHistograms``); ``("stopped",)`` last.

The child ignores SIGINT and SIGTERM (a Ctrl-C in a terminal reaches the whole process
group; the parent decides when the writer stops) and exits when its stdin closes, after
committing what it already received — so a parent killed with SIGKILL leaves no writer
behind. If the child dies, every waiting operation fails with ``StoreError`` and later
submits raise ``StoreClosed``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from sepp import logs
from sepp.storage.commit_stats import EMPTY, CommitHistograms
from sepp.storage.errors import StoreClosed, StoreError, StoreFailed
from sepp.storage.sqlite.committer import STOP, GroupLoop, Op, Pending, Results, resolve

T = TypeVar("T")
log = logging.getLogger("sepp.committer")
_HEADER = struct.Struct(">Q")
_PICKLE = pickle.HIGHEST_PROTOCOL
#: Seconds ``stop`` waits for the child to commit and exit before killing it.
STOP_TIMEOUT = 60.0


#: The child's argument that says "settings on stdin" (a child started by ``prespawn``).
SETTINGS_ON_STDIN = "-"
#: The writer process ``prespawn`` started and no ``ProcessCommitter`` has taken yet.
_spare: subprocess.Popen[bytes] | None = None


def _frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, _PICKLE)
    return _HEADER.pack(len(body)) + body


def _spawn(argument: str) -> subprocess.Popen[bytes]:
    # subprocess with close_fds=False (only stdio is inherited: Python's own descriptors
    # are non-inheritable) starts the child with posix_spawn, not fork: no fork handlers
    # run in this process (gRPC's would log that threads are busy), nothing is copied,
    # and the call returns as soon as the child exists (once per server start).
    return subprocess.Popen([sys.executable, "-m", "sepp.storage.sqlite.writer", argument],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=False)


def prespawn() -> None:
    """Start the writer process now, for the ``ProcessCommitter`` this process will start
    later (``sepp serve`` calls it before importing the server): the child's start — Python
    and its imports, most of the writer's start-up — then runs beside the parent's imports
    instead of after them (measured with ServerProcess, fastest of 15: 0.60 s → 0.46 s from
    spawn to the ready line; a loaded machine gains less, having no idle core).
    It waits for its settings and touches nothing meanwhile; one never taken exits when
    this process does (its stdin closes). A failure to start is ignored here: ``start``
    then starts a child as it would have without this."""
    global _spare
    if _spare is None:
        try:
            _spare = _spawn(SETTINGS_ON_STDIN)
        except OSError:
            _spare = None


def _take_spare() -> subprocess.Popen[bytes] | None:
    """The prespawned child, if there is one still running (taken: at most one committer gets it)."""
    global _spare
    proc, _spare = _spare, None
    if proc is not None and proc.poll() is not None:
        return None  # it died before it was needed: start a fresh one
    return proc


class ProcessCommitter:
    """The writer loop in a child process; see the module docstring.

    ``settings`` are ``SQLiteStore``'s writer settings, passed as the child's command-line
    argument (JSON): ``path`` (str), ``mode``, ``cache_mib``, ``max_group_ops``,
    ``fsync_interval``, ``commit_delay``, ``group_wait``.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        self._settings = settings
        self._proc: subprocess.Popen[bytes] | None = None
        self._to_child: asyncio.StreamWriter | None = None
        self._first: asyncio.Future[Any] | None = None
        self._ended: asyncio.Task[None] | None = None
        self._waiting: dict[int, tuple[asyncio.Future[Any], int]] = {}
        self._next = 0
        self._stopping = False
        self._dead: str | None = None
        self._stopped: asyncio.Future[None] | None = None
        self._failed: asyncio.Future[str] | None = None
        #: Jobs (weights) submitted and not yet resolved.
        self.backlog = 0
        #: Commits done and operations committed by the child (as of its last answer).
        self.commits = 0
        self.ops_committed = 0
        #: The child's commit histograms (as of its last answer).
        self.stats: CommitHistograms = EMPTY

    async def start(self) -> None:
        """Start the child and open the writer connection there; raises what opening raised
        (``StoreCorrupt``, ``StoreError``) or ``StoreError`` when the child cannot start."""
        loop = asyncio.get_running_loop()
        # The child logs like this process (sepp.logs: text or JSON lines, the node named).
        settings = json.dumps({**self._settings, "log": logs.child_settings()})
        spare = _take_spare()
        try:
            self._proc = spare or _spawn(settings)
        except OSError as exc:
            raise StoreError(f"cannot start the writer process: {exc}") from exc
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._first = loop.create_future()
        self._stopped = loop.create_future()
        self._failed = loop.create_future()
        await loop.connect_read_pipe(lambda: _FromChild(self._on_frame, self._on_end), self._proc.stdout)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, self._proc.stdin)
        self._to_child = asyncio.StreamWriter(transport, protocol, None, loop)
        if spare is not None:  # a prespawned child: its settings come first on its stdin
            body = settings.encode()
            self._to_child.write(_HEADER.pack(len(body)) + body)
        first = await asyncio.shield(self._first)
        if first is None:
            code = await self._wait_exit()
            self._stopped = None
            raise StoreError(f"the writer process exited at start (exit code {code})")
        if first[0] == "error":
            await self._wait_exit()
            self._stopped = None
            raise first[1]

    def submit(self, fn: Op[T], weight: int = 1) -> asyncio.Future[T]:
        """Send ``fn`` to the writer; the future resolves after its transaction commits.

        Must be called on the event loop. Raises ``StoreClosed`` once stopping began or the
        child is gone, and ``pickle.PicklingError``/``TypeError``/``AttributeError`` when
        ``fn`` cannot be pickled (a programming error).
        """
        if self._stopping or self._proc is None or self._dead is not None:
            raise StoreClosed(self._dead or "the store is closing")
        frame = _frame((self._next, fn, weight, len(self._waiting)))
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = (fut, weight)
        self._next += 1
        self.backlog += weight
        assert self._to_child is not None
        self._to_child.write(frame)
        return fut

    @property
    def idle(self) -> bool:
        """True when the child runs and holds no operation (so it holds no transaction)."""
        return not self._waiting and not self._stopping and self._dead is None and self._proc is not None

    async def failure(self) -> StoreFailed:
        """Wait until the child ends without being asked to (never returns otherwise); the
        error says how it ended. Pending and later writes fail meanwhile (``StoreError``,
        ``StoreClosed``)."""
        assert self._failed is not None, "start() first"
        return StoreFailed(await asyncio.shield(self._failed))

    async def stop(self) -> None:
        """Have the child commit everything already submitted and exit. Idempotent."""
        if self._proc is None:
            return
        if self._stopped is None:  # start() failed: make sure the child is gone
            if self._proc.poll() is None:
                self._proc.kill()
            await self._wait_exit()
            return
        if not self._stopping:
            self._stopping = True
        assert self._stopped is not None
        try:
            if self._dead is None and self._to_child is not None:
                try:
                    self._to_child.write(_frame(None))
                    await asyncio.wait_for(self._to_child.drain(), STOP_TIMEOUT)
                except ConnectionError:
                    pass
            await asyncio.wait_for(asyncio.shield(self._stopped), STOP_TIMEOUT)
            await asyncio.wait_for(self._wait_exit(), STOP_TIMEOUT)
        except TimeoutError:
            log.error("the writer process did not stop within %.0f s; killing it", STOP_TIMEOUT)
            self._proc.kill()
            await self._wait_exit()
        if self._to_child is not None:
            self._to_child.close()

    def kill(self) -> None:
        """SIGKILL the child at once (a forced stop): what it committed stays committed, what
        it had not is lost, exactly as in a crash; the waiting writes fail."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    async def _wait_exit(self) -> int:
        assert self._proc is not None
        return await asyncio.get_running_loop().run_in_executor(None, self._proc.wait)

    def _on_frame(self, frame: Any) -> None:
        """One answer of the child (called from the pipe's protocol, on the event loop)."""
        assert self._first is not None and self._stopped is not None
        if not self._first.done():
            self._first.set_result(frame)
            return
        if frame[0] == "stopped":
            if not self._stopped.done():
                self._stopped.set_result(None)
            return
        _, self.commits, self.ops_committed, results, self.stats = frame
        waiting = self._waiting
        for token, value, exc in results:
            fut, weight = waiting.pop(token)
            self.backlog -= weight
            resolve(fut, value, exc)

    def _on_end(self, error: BaseException | None) -> None:
        """The child's stdout closed (it exited) or sent what cannot be read (``error``)."""
        if self._first is not None and not self._first.done():
            self._first.set_result(None)
            return
        if self._ended is None:
            self._ended = asyncio.ensure_future(self._end(error))

    async def _end(self, error: BaseException | None) -> None:
        assert self._stopped is not None and self._failed is not None and self._proc is not None
        if error is not None:  # a frame that does not unpickle: nothing can be trusted
            log.error("the writer process sent a bad answer: %r", error)
            self._proc.kill()
        code = await self._wait_exit()
        self._dead = (f"the writer process sent a bad answer: {error!r}" if error is not None
                      else f"the writer process exited (exit code {code})")
        if not self._stopping and not self._stopped.done():
            log.error("%s; writes fail until sepp restarts", self._dead)
            self._failed.set_result(self._dead)
        for fut, _weight in self._waiting.values():
            if not fut.done():  # committed or not: nobody can tell any more
                fut.set_exception(StoreFailed(self._dead))
        self._waiting.clear()
        self.backlog = 0
        if not self._stopped.done():
            self._stopped.set_result(None)


class _FromChild(asyncio.Protocol):
    """Reads the child's stdout: frames are parsed and handed to ``on_frame`` as they
    arrive, inside the read callback (no task or future per answer); ``on_end`` is called
    once, at the end of the stream or with the error of a frame that cannot be read."""

    def __init__(self, on_frame: Callable[[Any], None], on_end: Callable[[BaseException | None], None]) -> None:
        self._on_frame = on_frame
        self._on_end = on_end
        self._buf = bytearray()
        self._broken = False

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return
        buf = self._buf
        buf += data
        start, size = 0, _HEADER.size
        try:
            while len(buf) - start >= size:
                (n,) = _HEADER.unpack_from(buf, start)
                if len(buf) - start - size < n:
                    break
                frame = pickle.loads(buf[start + size:start + size + n])
                start += size + n
                self._on_frame(frame)
        except Exception as exc:
            self._broken = True
            self._on_end(exc)
            return
        del buf[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._broken:
            self._broken = True
            self._on_end(None)


# ---------------------------------------------------------------------- child side


class _Out:
    """Frames to the parent (stdout); the child's one thread is the only writer."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def send(self, obj: Any) -> None:
        try:
            data = _frame(obj)
        except Exception:  # an exception or value that does not pickle: send what can be
            data = _frame(_picklable(obj))
        self._stream.write(data)
        self._stream.flush()


def _picklable(obj: Any) -> Any:
    if obj[0] != "results":
        return ("error", StoreError(repr(obj[1:])))
    fixed = []
    for token, value, exc in obj[3]:
        try:
            pickle.dumps((value, exc), _PICKLE)
            fixed.append((token, value, exc))
        except Exception as err:
            fixed.append((token, None, StoreError(f"the writer's answer does not pickle: {exc or err!r}")))
    return (obj[0], obj[1], obj[2], fixed)


class _Frames:
    """The child's operation source: frames read from stdin by the writer thread itself, so
    an operation costs no hand-over between threads (one wake-up fewer per write, which is
    what a lone producer's latency is made of). ``get`` blocks for the next operation;
    ``get_nowait`` takes what has already arrived. ``None`` or the end of input is ``STOP``."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = bytearray()
        self._items: deque[Pending[Any] | object] = deque()
        self._eof = False

    def get(self) -> Pending[Any] | object:
        while not self._items:
            if self._eof:
                return STOP
            self._fill(block=True)
        return self._items.popleft()

    def get_nowait(self) -> Pending[Any] | object:
        while not self._items and not self._eof and self._fill(block=False):
            pass
        if not self._items:
            raise queue.Empty
        return self._items.popleft()

    def _fill(self, *, block: bool) -> bool:
        """Read what the pipe holds (waiting for it when ``block``); False when nothing was there."""
        if not block and not select.select([self._fd], [], [], 0)[0]:
            return False
        data = os.read(self._fd, 1 << 20)
        if not data:
            self._eof = True
            self._items.append(STOP)
            return True
        buf = self._buf
        buf += data
        start, size = 0, _HEADER.size
        while len(buf) - start >= size:
            (n,) = _HEADER.unpack_from(buf, start)
            if len(buf) - start - size < n:
                break
            item = pickle.loads(memoryview(buf)[start + size:start + size + n])
            start += size + n
            if item is None:
                self._eof = True
                self._items.append(STOP)
                break
            token, fn, weight, siblings = item
            self._items.append(Pending(fn, token, weight, siblings))
        del buf[:start]
        return True


def _read_exactly(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd`` (never more: what follows stays in the pipe); None at the end of input."""
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def child_main() -> None:
    """Entry point of the writer process (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The modules of the operations (unpickled from stdin) and what they import, before the
    # settings are read: a prespawned child loads them while its parent starts.
    import sepp.storage.sqlite.admin_writes
    import sepp.storage.sqlite.ops
    import sepp.storage.sqlite.periodic
    import sepp.storage.sqlite.sweeps  # noqa: F401
    # stdout carries frames only: keep stray prints and logs away from it.
    stdin_fd = os.dup(0)
    if sys.argv[1] == SETTINGS_ON_STDIN:  # prespawned: wait for them (nothing else comes first)
        header = _read_exactly(stdin_fd, _HEADER.size)
        if header is None:
            return  # the parent never needed this writer
        (n,) = _HEADER.unpack(header)
        body = _read_exactly(stdin_fd, n)
        if body is None:
            return
        settings = json.loads(body)
    else:
        settings = json.loads(sys.argv[1])
    out = _Out(os.fdopen(os.dup(1), "wb", buffering=1 << 16))
    os.dup2(2, 1)
    logs.configure_child(settings.get("log"), "writer")
    from sepp.storage.sqlite.schema import connect_writer

    path = Path(settings["path"])

    def deliver(results: Results) -> None:
        try:
            out.send(("results", group.commits, group.ops_committed,
                      [(item.token, value, exc) for item, value, exc in results], group.stats.snapshot()))
        except (BrokenPipeError, OSError):
            pass  # the parent is gone; keep committing what was received, then exit

    group = GroupLoop(path, settings["mode"], lambda: connect_writer(path, settings["mode"], settings["cache_mib"]),
                      deliver, max_group_ops=settings["max_group_ops"], fsync_interval=settings["fsync_interval"],
                      commit_delay=settings["commit_delay"], group_wait=settings["group_wait"],
                      source=_Frames(stdin_fd))
    try:
        conn = group.open()
    except BaseException as exc:
        out.send(("error", exc))
        return
    out.send(("ready",))
    group.run(conn)
    try:
        out.send(("stopped",))
    except (BrokenPipeError, OSError):
        pass

