"""``devmem exporter``'s HTTP server: ``/metrics`` (and ``/``) in Prometheus' text format, on 127.0.0.1 unless told.

The server only reads: the platform's readings, ``/proc`` and the reservation ledger (never written, never locked,
never created). It stops with exit 0 on SIGTERM (a pod being stopped) or Ctrl-C.

No client can stall it. One thread serves every connection without ever blocking on one (``selectors``): it reads
each request's head (at most :data:`MAX_HEAD` bytes; a longer one is answered 431) and writes each answer; a client
that has not sent its whole request within the client timeout, or not taken its whole answer within it once the
answer is ready, is closed. At most ``max_connections`` are open at once (fewer where the descriptor limit is
lower): one more closes the oldest that is not waiting for its answer, and a full descriptor table does the same, so
a scrape always gets in. Another thread reads the node: every request waiting when a reading starts is answered
from that one reading, so many clients cost one reading, not one each.
"""

from __future__ import annotations

import errno
import logging
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any
from urllib.parse import unquote

from devmem._text import shown
from devmem.errors import DevmemError

log = logging.getLogger("devmem.exporter")

#: Where the exporter listens by default: this host only (``--listen 0.0.0.0:9633`` exposes it).
DEFAULT_LISTEN = "127.0.0.1:9633"
#: What to install where ``prometheus-client`` is missing.
INSTALL = "pip install prometheus-client (from a devmem checkout, pip install -e '.[exporter]')"
#: The most connections open at once, by default (``--max-connections``).
DEFAULT_MAX_CONNECTIONS = 256
#: Seconds a client has to send its request, and again to take its answer, by default (``--client-timeout``).
DEFAULT_CLIENT_TIMEOUT = 10.0
#: The longest request head (request line and headers) read: Prometheus sends a few hundred bytes.
MAX_HEAD = 8192
#: Descriptors kept free of connections for the readings (``/proc``, the ledger, the vendor library).
SPARE_DESCRIPTORS = 64


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9633`` for IPv6; port 0 picks a free one) as ``(host, port)``; a
    :class:`~devmem.DevmemError` naming the value otherwise."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise DevmemError(
            f"--listen must be HOST:PORT with a port from 0 to 65535 (127.0.0.1:9633, 0.0.0.0:9633, "
            f"[::1]:9633), got {shown(text)}"
        )
    return host, int(port)


def prometheus_client() -> Any:
    """The ``prometheus_client`` module, or a :class:`~devmem.DevmemError` saying what to install."""
    try:
        import prometheus_client
    except ImportError:
        raise DevmemError(f"devmem exporter needs prometheus-client, which is not installed: {INSTALL}") from None
    return prometheus_client


def connection_limit(wanted: int) -> int:
    """``wanted``, or fewer where the descriptor limit leaves less room beside :data:`SPARE_DESCRIPTORS`."""
    try:
        import resource
    except ImportError:  # not Unix: no such limit to read
        return wanted
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - SPARE_DESCRIPTORS))


# ---- one request ----------------------------------------------------------------------------------------
class _Request:
    """What an answer depends on: the method, the path, the query and the two headers that choose its form."""

    def __init__(self, method: str, path: str, query: str, accept: str | None, encoding: str | None):
        self.method, self.path, self.query, self.accept, self.encoding = method, path, query, accept, encoding

    def key(self) -> tuple[str, str, str, str | None, str | None]:
        return self.method, self.path, self.query, self.accept, self.encoding

    @classmethod
    def parse(cls, head: bytes) -> _Request | None:
        """The request of ``head`` (the bytes before its blank line), or ``None`` where it is no HTTP/1 request."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
            return None
        target, _, query = parts[1].partition("?")
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        return cls(parts[0].upper(), unquote(target), query, headers.get("accept"), headers.get("accept-encoding"))


def _response(status: str, headers: Iterable[tuple[str, str]], body: bytes, head_only: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers)]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)


_BAD_REQUEST = _response("400 Bad Request", [("Content-Type", "text/plain")], b"not an HTTP/1 request\n")
_TOO_LARGE = _response(
    "431 Request Header Fields Too Large", [("Content-Type", "text/plain")], b"request head too large\n"
)
_UNAVAILABLE = _response("503 Service Unavailable", [("Content-Type", "text/plain")], b"the reading failed\n")


class _Replay:
    """A collector that yields the metric families of one reading again (one reading serves every request)."""

    def __init__(self, metrics: list[Any]):
        self.metrics = metrics

    def collect(self) -> Iterable[Any]:
        return iter(self.metrics)

    def describe(self) -> list[Any]:
        return []


def _answers(collector: Any, requests: Iterable[_Request]) -> dict[tuple, bytes]:
    """The answer to each of ``requests``, all from one reading of ``collector``; one answer per form asked. A
    reading or a rendering that raises is answered 503 (and logged): the server goes on serving."""
    requests = list(requests)
    try:
        return _rendered(list(collector.collect()), requests)
    except Exception as exc:  # the collector leaves out what fails; this is a bug, answered and logged
        log.warning("devmem exporter: a reading failed: %s: %s", type(exc).__name__, exc)
        return {r.key(): _UNAVAILABLE for r in requests}


def _rendered(metrics: list[Any], requests: list[_Request]) -> dict[tuple, bytes]:
    client = prometheus_client()
    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(_Replay(metrics))
    app = client.make_wsgi_app(registry)
    answers: dict[tuple, bytes] = {}
    for request in requests:
        if request.key() in answers:
            continue
        environ = {
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query,
            **({"HTTP_ACCEPT": request.accept} if request.accept is not None else {}),
            **({"HTTP_ACCEPT_ENCODING": request.encoding} if request.encoding is not None else {}),
        }
        started: list[Any] = []
        body = b"".join(app(environ, lambda status, headers, started=started: started.extend((status, headers))))
        answers[request.key()] = _response(started[0], started[1], body, head_only=request.method == "HEAD")
    return answers


# ---- one connection -------------------------------------------------------------------------------------
READING, WAITING, WRITING = "reading", "waiting", "writing"


class _Connection:
    def __init__(self, sock: socket.socket, now: float, timeout: float):
        self.sock = sock
        self.head = bytearray()
        self.state = READING
        self.deadline = now + timeout
        self.request: _Request | None = None
        self.out = memoryview(b"")

    def answer(self, data: bytes, now: float, timeout: float) -> None:
        self.state, self.out, self.deadline = WRITING, memoryview(data), now + timeout


class ExporterServer:
    """Serves ``collector`` over HTTP on ``host:port`` (port 0: a free one, then ``server_port``) until
    :meth:`shutdown`; :meth:`server_close` closes the socket and every connection."""

    def __init__(
        self,
        collector: Any,
        host: str,
        port: int,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
    ):
        self.collector = collector
        self.max_connections = connection_limit(max_connections)
        self.client_timeout = client_timeout
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self.socket = socket.create_server((host, port), family=family, backlog=128)
        except OSError as exc:
            raise DevmemError(f"devmem exporter cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.socket.setblocking(False)
        self.server_port: int = self.socket.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.socket, selectors.EVENT_READ)
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._connections: dict[_Connection, None] = {}  # oldest first
        self._listening_again = 0.0  # where accepting paused (no descriptor left): when it resumes
        self._pending: list[_Connection] = []  # waiting for the next reading
        self._answered: list[tuple[_Connection, bytes]] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve, name="devmem-exporter-http", daemon=True),
            threading.Thread(target=self._read_node, name="devmem-exporter-reader", daemon=True),
        ]

    def start(self) -> ExporterServer:
        for thread in self._threads:
            thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and wait for both threads to end (a reading in progress ends by its own deadline)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._wake()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def server_close(self) -> None:
        for conn in list(self._connections):
            self._close(conn)
        for sock in (self.socket, self._wake_read, self._wake_write):
            sock.close()
        self._selector.close()

    # ---- the reading thread ------------------------------------------------------------------------------
    def _read_node(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                batch, self._pending = self._pending, []
            answers = _answers(self.collector, [c.request for c in batch if c.request is not None])
            with self._cond:
                self._answered += [(c, answers[c.request.key()]) for c in batch if c.request is not None]
            self._wake()

    def _wake(self) -> None:
        with suppress(OSError):  # full (a wake-up is pending already) or closed
            self._wake_write.send(b"\0")

    # ---- the serving thread ------------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            deadlines = [c.deadline for c in self._connections if c.state != WAITING]
            if self._listening_again:
                deadlines.append(self._listening_again)
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self.socket:
                    self._accept()
                elif key.fileobj is self._wake_read:
                    self._drain_wakeups()
                else:
                    conn = key.data
                    if conn.state == READING:
                        self._receive(conn)
                    elif conn.state == WRITING:
                        self._send(conn)
            self._expire(time.monotonic())

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time; the rest at the next turn
            try:
                sock, _ = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # no descriptor left: close the oldest connection to make room, or stop accepting a moment
                    # (the listening socket stays readable, and selecting on it would spin)
                    if not self._evict():
                        self._pause_accepting()
                        return
                    continue
                return  # the client gave up before it was accepted (ECONNABORTED), and the like
            sock.setblocking(False)
            if len(self._connections) >= self.max_connections:
                self._evict()
            conn = _Connection(sock, time.monotonic(), self.client_timeout)
            self._connections[conn] = None
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _evict(self) -> bool:
        """Close the oldest connection that is not waiting for its answer (else the oldest); ``False``: none."""
        if not self._connections:
            return False
        victim = next((c for c in self._connections if c.state != WAITING), None)
        self._close(victim or next(iter(self._connections)))
        return True

    def _pause_accepting(self) -> None:
        self._selector.unregister(self.socket)
        self._listening_again = time.monotonic() + 0.1

    def _receive(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(MAX_HEAD + 1 - len(conn.head))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the client closed (or reset) before its request was whole
            self._close(conn)
            return
        conn.head += data
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.head) > MAX_HEAD:
                self._reply(conn, _TOO_LARGE)
            return
        conn.request = _Request.parse(bytes(conn.head[:end]))
        conn.head = bytearray()
        if conn.request is None:
            self._reply(conn, _BAD_REQUEST)
            return
        conn.state = WAITING
        self._selector.unregister(conn.sock)  # nothing more is read from it (a close is seen as its answer is sent)
        with self._cond:
            self._pending.append(conn)
            self._cond.notify()

    def _reply(self, conn: _Connection, data: bytes) -> None:
        if conn.state == WAITING:
            self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
        else:
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        conn.answer(data, time.monotonic(), self.client_timeout)
        self._send(conn)

    def _send(self, conn: _Connection) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            self._close(conn)

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_read.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self._cond:
            answered, self._answered = self._answered, []
        for conn, data in answered:
            if conn in self._connections:  # not closed (evicted) while it waited
                self._reply(conn, data)

    def _expire(self, now: float) -> None:
        """Close every connection past its deadline (not one waiting for its answer: the reading has its own);
        accept again where accepting paused."""
        for conn in [c for c in self._connections if c.state != WAITING and c.deadline <= now]:
            self._close(conn)
        if self._listening_again and now >= self._listening_again:
            self._listening_again = 0.0
            self._selector.register(self.socket, selectors.EVENT_READ)

    def _close(self, conn: _Connection) -> None:
        if conn not in self._connections:
            return
        del self._connections[conn]
        if conn.state != WAITING:
            self._selector.unregister(conn.sock)
        conn.sock.close()


def serve(
    collector: Any,
    host: str,
    port: int,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
) -> ExporterServer:
    """An HTTP server on ``host:port`` whose every reading of ``collector`` answers the requests waiting for it,
    serving in daemon threads; ``server_port`` is the port it took. ``shutdown()`` stops it."""
    prometheus_client()
    return ExporterServer(collector, host, port, max_connections=max_connections, client_timeout=client_timeout).start()


def run(
    collector: Any,
    listen: str,
    announce: Callable[[str], None],
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
) -> int:
    """Serve ``collector`` on ``listen`` until SIGTERM or Ctrl-C (exit 0); ``announce`` is told the URL."""
    host, port = parse_listen(listen)
    server = serve(collector, host, port, max_connections=max_connections, client_timeout=client_timeout)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        shown_host = f"[{host}]" if ":" in host else host
        announce(f"devmem exporter: serving http://{shown_host}:{server.server_port}/metrics")
        while not stop.wait(3600):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.shutdown()
        server.server_close()
    return 0
