"""Real processes that hold reservations, for the ledger's tests: each takes commands on stdin, one per line.

``reserve N`` (bytes of the cpu platform's device 0) answers ``ok N`` or ``refused``; ``release`` releases what
it holds and answers ``released``; end of input exits (releasing at exit).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The uid and gid of user ``nobody``, whom tests act as for "another user".
NOBODY = 65534
#: Tests that act as another user need root.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to act as another user")

WORKER = """
import sys
from devmem.cpu import CpuPlatform
from devmem.engine.reservations import ReservationRefused, reserve

held = []
for line in sys.stdin:
    word, *rest = line.split()
    if word == "reserve":
        try:
            held.append(reserve(0, int(rest[0]), ledger_dir=sys.argv[1], platform=CpuPlatform()))
            print("ok", rest[0], flush=True)
        except ReservationRefused:
            print("refused", flush=True)
    elif word == "release":
        for r in held:
            r.release()
        held.clear()
        print("released", flush=True)
"""


class Hung(BaseException):
    """Raised by :func:`no_hang`'s alarm; a BaseException, so that no ``except OSError`` in the code swallows it."""


@contextmanager
def no_hang(seconds: int = 5) -> Iterator[None]:
    """Fail with :class:`Hung` where the block runs longer than ``seconds`` (a call blocked on a FIFO, say)."""

    def ring(*_: object) -> None:
        raise Hung(f"the call blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Worker:
    """One process running :data:`WORKER` on the ledger in ``directory``."""

    def __init__(self, directory: Path, command_bytes: int = 0):
        """``command_bytes``: pad the worker's command line to about that many bytes (its stack limit raised so
        the kernel takes them: a command line may reach a quarter of the stack limit)."""
        padding = ["x" * (120 << 10)] * -(-command_bytes // (120 << 10))

        def room() -> None:
            if padding:
                resource.setrlimit(resource.RLIMIT_STACK, (64 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))

        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(directory), *padding],
            preexec_fn=room,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "DEVMEM_PLATFORM": "cpu"},
        )
        self.held = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def reserve(self, nbytes: int) -> bool:
        answer = self.ask(f"reserve {nbytes}")
        assert answer in (f"ok {nbytes}", "refused"), answer
        if answer != "refused":
            self.held += nbytes
        return answer != "refused"

    def release(self) -> None:
        assert self.ask("release") == "released"
        self.held = 0

    def kill(self) -> None:
        """SIGKILL: nothing of the process's own runs."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.held = 0

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def as_nobody(work) -> str:
    """Run ``work()`` in a forked child as user ``nobody``; what it returned, or the error it raised, as text."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            answer = str(work())
        except BaseException as exc:
            answer = f"{type(exc).__name__}: {exc}"
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        answer = f.read()
    os.waitpid(pid, 0)
    return answer
