"""A small TCP proxy that can be paused: real sockets between a server and its database.

``PausableProxy(upstream_host, upstream_port)`` listens on ``127.0.0.1:<port>`` and relays
every connection to the upstream, one thread per direction. ``pause()`` stops relaying
(bytes read meanwhile are held, connections stay open: the database simply stops
answering, as it does when its host stalls); ``resume()`` forwards what was held and goes
on. ``close()`` ends the listener and every connection. Used by the readiness tests
 to make PostgreSQL stop answering without stopping PostgreSQL.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class PausableProxy:
    """See the module docstring. ``port`` is the listening port (``listen_port``, or a free
    one when 0: a proxy made again on the port of a closed one serves the same address)."""

    def __init__(self, upstream_host: str, upstream_port: int, listen_port: int = 0) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", listen_port))
        self.port: int = self._listener.getsockname()[1]
        self._running = threading.Event()
        self._running.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def pause(self) -> None:
        """Stop relaying bytes (in both directions) until ``resume``."""
        self._running.clear()

    def resume(self) -> None:
        """Relay again, the held bytes first."""
        self._running.set()

    def close(self) -> None:
        """Close the listener and every relayed connection."""
        self._closed = True
        self._running.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                # shutdown first: a bare close() leaves a pump thread blocked in recv() on the
                # socket, which keeps the connection open (Linux releases it only when that
                # recv returns) — and a PostgreSQL backend paused mid-transaction then holds
                # its locks past the test (the session's DROP SCHEMA waited on them).
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._running.wait()
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


#: The client's connection preface (RFC 9113 §3.4), before its first frame.
_PREFACE = 24
#: The HTTP/2 frame types a cut still lets through (RFC 9113 §6): SETTINGS, PING, GOAWAY and
#: WINDOW_UPDATE — the connection's upkeep, not a call. ``HEADERS`` (1) opens a call.
_SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE, _HEADERS = 4, 6, 7, 8, 1


class OneWayCut(PausableProxy):
    """A relay to a sepp server whose client-to-server direction can be cut (``cut()``): from
    then on every call a client sends is read and dropped (``dropped`` counts the bytes of its
    frames), while the server's answers to what it received before still come back. A call
    sent after the cut is never seen by the server and never answered (nothing of it is
    stored), as when the network loses every packet of it one way.

    Only the calls are cut: the relay reads the client's HTTP/2 frames and still passes the
    connection's upkeep (SETTINGS and their acks, PING and their acks, GOAWAY, the window
    updates of the connection and of the calls the server saw). Dropping those too would
    make the server end the connection when a ping it sent before the cut goes unanswered
    for a minute (``GOAWAY … ping_timeout``), and the calls sent into the cut would then
    fail (``UNAVAILABLE``, a new connection, a deadline) instead of staying unanswered — a
    test that takes that long on a loaded machine would see another story."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        super().__init__(host, int(port))
        self._cut = threading.Event()
        self._count = threading.Lock()
        #: Bytes of the frames clients sent after ``cut()`` (dropped).
        self.dropped = 0

    @property
    def target(self) -> str:
        """The ``host:port`` clients connect to."""
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Drop the calls clients send from now on (see the class)."""
        self._cut.set()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        if source.getsockname()[1] != self.port:  # the server's bytes: relayed as they are
            super()._pump(source, target)
            return
        pending = bytearray()
        preface = _PREFACE
        seen = 0  # the highest stream the server was sent the HEADERS of
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                pending += data
                out = bytearray()
                if preface:
                    taken = pending[:preface]
                    out += taken
                    del pending[:len(taken)]
                    preface -= len(taken)
                while not preface and len(pending) >= 9:
                    size = 9 + int.from_bytes(pending[:3], "big")
                    if len(pending) < size:
                        break
                    kind, stream = pending[3], int.from_bytes(pending[5:9], "big") & 0x7FFFFFFF
                    upkeep = kind in (_SETTINGS, _PING, _GOAWAY) or (kind == _WINDOW_UPDATE and stream <= seen)
                    if self._cut.is_set() and not upkeep:
                        with self._count:
                            self.dropped += size
                    else:
                        out += pending[:size]
                        if kind == _HEADERS:
                            seen = max(seen, stream)
                    del pending[:size]
                if out:
                    self._running.wait()
                    target.sendall(out)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
