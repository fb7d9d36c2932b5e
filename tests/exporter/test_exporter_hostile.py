"""``devmem exporter``'s server against hostile clients on 127.0.0.1: idle and slow connections, partial and huge
requests, clients that never read, more connections than it keeps, a full descriptor table. Each is bounded in
time and memory, and a scrape is answered throughout.

The server runs as the command runs it (``devmem exporter`` in a subprocess, on the cpu platform) where its
process is what is measured (its CPU time, its descriptor limit), else in this process (``serve``)."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.core import GaugeMetricFamily  # noqa: E402

from devmem.cpu import CpuPlatform  # noqa: E402
from devmem.exporter.metrics import DevmemCollector  # noqa: E402
from devmem.exporter.readings import NodeReader  # noqa: E402
from devmem.exporter.server import MAX_HEAD, serve  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def scrape(port: int, timeout: float = 10.0) -> tuple[int, float, str]:
    """One scrape of ``/metrics``: its status, seconds and body."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as answer:
        return answer.status, time.monotonic() - started, answer.read().decode()


def connect(port: int, send: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if send:
        sock.sendall(send)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (whatever it sent before)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


@contextlib.contextmanager
def descriptors(needed: int) -> Iterator[None]:
    """This process's descriptor limit raised to ``needed`` for the block (skipped where the hard limit is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"needs {needed} file descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def server(tmp_path):
    """A server in this process on the cpu platform: ``server(**flags)`` starts one and gives its port."""
    started = []

    def start(collector=None, **flags) -> int:
        collector = collector or DevmemCollector(NodeReader(CpuPlatform(), tmp_path / "ledger", candidates=[]))
        started.append(serve(collector, "127.0.0.1", 0, **flags))
        return started[-1].server_port

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


class Exporter:
    """``devmem exporter`` in a subprocess on the cpu platform, listening on a free port of 127.0.0.1."""

    def __init__(self, tmp_path: Path, *flags: str, nofile: int | None = None, fill_to: int | None = None):
        """``nofile``: its descriptor limit; ``fill_to``: once it serves, it opens descriptors until that many are
        left free (a table nearly full, whatever limit the connections were sized by)."""
        env = {**os.environ, "DEVMEM_PLATFORM": "cpu", "DEVMEM_LEDGER_DIR": str(tmp_path / "ledger")}
        code = "from devmem.command.main import main; raise SystemExit(main())"
        if fill_to is not None:
            code = FILLER.format(free=fill_to) + code
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "exporter", "--listen", "127.0.0.1:0", *flags],
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
            preexec_fn=None if nofile is None else lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)),
        )
        assert self.proc.stderr is not None
        said = []
        while not (found := re.search(r"127\.0\.0\.1:(\d+)/metrics", said[-1] if said else "")):
            said.append(self.proc.stderr.readline())
            assert said[-1], "".join(said)  # it ended before it served
        self.port = int(found.group(1))

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


#: Run before the command where the test fills the exporter's descriptor table: a thread that waits for the
#: server to announce itself, then holds descriptors until only ``free`` are left.
FILLER = """
import os, resource, sys, threading
def fill():
    held = []
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    while True:
        try:
            held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            break
    for fd in held[len(held) - {free}:]:
        os.close(fd)
    fill.held = held
write = sys.stderr.write
def announced(text):
    if "serving http" in text:
        fill()
    return write(text)
sys.stderr.write = announced
"""


# ---- the case the goal names -----------------------------------------------------------------------------------------
def test_a_scrape_is_answered_within_its_deadline_while_1000_idle_connections_and_50_slow_clients_are_held(
    tmp_path,
):
    with descriptors(4096):
        exporter = Exporter(tmp_path, "--deadline", "5")
        held: list[socket.socket] = []
        try:
            held += [connect(exporter.port) for _ in range(1000)]  # idle: nothing sent
            held += [connect(exporter.port, b"GET /metrics HTTP/1.1\r\nHost: x") for _ in range(25)]  # a head begun
            for _ in range(25):  # a whole request, then never read (a receive buffer as small as it gets)
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
                sock.connect(("127.0.0.1", exporter.port))
                sock.sendall(REQUEST)
                held.append(sock)
            status, seconds, body = scrape(exporter.port)
            assert status == 200 and "devmem_device_total_bytes" in body
            assert seconds < 5
        finally:
            for sock in held:
                sock.close()
            exporter.stop()


# ---- one client at a time -------------------------------------------------------------------------------------
def test_an_idle_client_is_closed_at_the_client_timeout(server):
    port = server(client_timeout=0.3)
    assert closed_within(connect(port), 3)


def test_a_client_sending_its_request_a_byte_at_a_time_is_closed_at_the_client_timeout(server):
    """A timeout per receive would never fire: each byte comes well within it."""
    port = server(client_timeout=0.5)
    sock = connect(port)
    started = time.monotonic()
    with contextlib.suppress(OSError):
        for byte in REQUEST[:-1]:
            sock.send(bytes([byte]))
            time.sleep(0.05)  # the whole head would take 2 s
    assert closed_within(sock, 3) and time.monotonic() - started < 1.9


def test_a_request_head_past_its_bound_is_answered_431_and_closed(server):
    port = server()
    sock = connect(port)
    with contextlib.suppress(OSError):
        sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Padding: " + b"a" * (4 * MAX_HEAD))
    sock.settimeout(5)
    assert sock.recv(64).startswith(b"HTTP/1.1 431")


def test_a_request_that_is_no_http_is_answered_400(server):
    port = server()
    sock = connect(port, b"\x16\x03\x01 hello\r\n\r\n")
    sock.settimeout(5)
    assert sock.recv(64).startswith(b"HTTP/1.1 400")


class Large:
    """A collector whose answer (about 8 MB) is far more than the sockets' buffers hold."""

    def collect(self):
        family = GaugeMetricFamily("large", "A large answer.", labels=["n", "padding"])
        for n in range(40000):
            family.add_metric([str(n), "x" * 150], n)
        yield family

    def describe(self):
        return []


def test_a_client_that_never_reads_its_answer_is_closed_at_the_client_timeout(server):
    port = server(collector=Large(), client_timeout=0.5)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    sock.connect(("127.0.0.1", port))
    sock.sendall(REQUEST)
    time.sleep(2)  # the answer is ready well within this, and the client takes none of it
    assert closed_within(sock, 3)


def test_connections_past_the_cap_close_the_oldest_and_a_scrape_still_gets_in(server):
    port = server(max_connections=8)
    idle = [connect(port) for _ in range(20)]
    time.sleep(0.2)
    status, _, _ = scrape(port)
    assert status == 200
    assert sum(closed_within(sock, 0.5) for sock in idle[:12]) == 12  # the oldest, to make room
    for sock in idle:
        sock.close()


def test_requests_waiting_together_share_one_reading(server, tmp_path):
    class Counting(DevmemCollector):
        readings = 0

        def collect(self):
            Counting.readings += 1
            time.sleep(0.5)  # a slow node: the others' requests arrive while it is read
            yield from super().collect()

    port = server(collector=Counting(NodeReader(CpuPlatform(), tmp_path / "ledger", candidates=[])))
    answers: list[int] = []
    threads = [threading.Thread(target=lambda: answers.append(scrape(port)[0])) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * 20 and Counting.readings <= 3


class FailsFirst:
    """A collector whose first reading raises and whose second yields what cannot be written (bugs), the next ones
    answer."""

    def __init__(self):
        self.readings = 0

    def collect(self):
        self.readings += 1
        if self.readings == 1:
            raise RuntimeError("a bug in a reading")
        yield object() if self.readings == 2 else GaugeMetricFamily("fine", "A reading that worked.", value=1)

    def describe(self):
        return []


def test_a_reading_that_fails_is_answered_503_and_the_server_goes_on(server):
    port = server(collector=FailsFirst())
    for _ in range(2):
        with pytest.raises(urllib.error.HTTPError, match="503"):
            scrape(port, timeout=5)
    status, _, body = scrape(port, timeout=5)
    assert status == 200 and "fine 1.0" in body


# ---- the process as a whole -----------------------------------------------------------------------------------
def test_idle_connections_past_the_descriptor_limit_neither_spin_the_server_nor_stop_scrapes(tmp_path):
    """More connections than the exporter has descriptors: it keeps what its limit allows, and its CPU stays idle
    while they are held (a server accepting into a full table spins on the listening socket)."""
    with descriptors(2048):
        exporter = Exporter(tmp_path, nofile=128)
        idle: list[socket.socket] = []
        try:
            idle += [connect(exporter.port) for _ in range(500)]
            time.sleep(0.5)
            before = exporter.cpu_seconds()
            time.sleep(2)
            assert exporter.cpu_seconds() - before < 0.3
            assert scrape(exporter.port)[0] == 200
        finally:
            for sock in idle:
                sock.close()
            exporter.stop()


def test_a_full_descriptor_table_neither_spins_the_server_nor_stops_scrapes(tmp_path):
    """The table fills beyond what the connections were sized for (a hung vendor call holding files, say): an
    accept that finds no descriptor closes the oldest connection instead, and never spins."""
    with descriptors(2048):
        exporter = Exporter(tmp_path, fill_to=8)
        idle: list[socket.socket] = []
        try:
            idle += [connect(exporter.port) for _ in range(100)]
            time.sleep(0.5)
            before = exporter.cpu_seconds()
            time.sleep(2)
            assert exporter.cpu_seconds() - before < 0.3
            assert scrape(exporter.port)[0] == 200
        finally:
            for sock in idle:
                sock.close()
            exporter.stop()
