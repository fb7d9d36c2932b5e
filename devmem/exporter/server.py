"""``devmem exporter``'s HTTP server: ``/metrics`` (and ``/``) in Prometheus' text format, on 127.0.0.1 unless told.

The server only reads: the platform's readings, ``/proc`` and the reservation ledger (never written, never locked,
never created). It stops with exit 0 on SIGTERM (a pod being stopped) or Ctrl-C.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from devmem._text import shown
from devmem.errors import DevmemError

log = logging.getLogger("devmem.exporter")

#: Where the exporter listens by default: this host only (``--listen 0.0.0.0:9633`` exposes it).
DEFAULT_LISTEN = "127.0.0.1:9633"
#: What to install where ``prometheus-client`` is missing.
INSTALL = "pip install prometheus-client (from a devmem checkout, pip install -e '.[exporter]')"


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


class _Quiet(WSGIRequestHandler):
    """A request handler that logs requests at debug level instead of writing each to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("devmem exporter: %s %s", self.address_string(), format % args)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def serve(collector: Any, host: str, port: int) -> WSGIServer:
    """An HTTP server on ``host:port`` whose every request reads ``collector`` afresh, serving in a daemon thread;
    ``server_port`` is the port it took. ``shutdown()`` stops it."""
    client = prometheus_client()
    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server_class = type("ExporterServer", (_Server,), {"address_family": _family(host)})
    try:
        server: WSGIServer = make_server(host, port, client.make_wsgi_app(registry), server_class, handler_class=_Quiet)
    except OSError as exc:
        raise DevmemError(f"devmem exporter cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    threading.Thread(target=server.serve_forever, name="devmem-exporter-http", daemon=True).start()
    return server


def run(collector: Any, listen: str, announce: Callable[[str], None]) -> int:
    """Serve ``collector`` on ``listen`` until SIGTERM or Ctrl-C (exit 0); ``announce`` is told the URL."""
    host, port = parse_listen(listen)
    server = serve(collector, host, port)
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
