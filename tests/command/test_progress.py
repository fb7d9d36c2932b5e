"""devmem.progress: a progress line on stderr for seconds-long work, on a terminal only, through tqdm."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import sys
import termios

import pytest

from devmem.engine.block_cost import BlockRun, measure_block_cost
from devmem.progress import progress


@pytest.fixture
def terminal():
    """A writable end of an 80x24 pseudo-terminal, and a function reading what was written to it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # an 80x24 terminal
    stream = os.fdopen(slave, "w")

    def written() -> str:
        stream.flush()
        os.set_blocking(master, False)
        chunks = []
        try:
            while chunk := os.read(master, 65536):
                chunks.append(chunk)
        except BlockingIOError:
            pass
        return b"".join(chunks).decode(errors="replace")

    yield stream, written
    stream.close()
    os.close(master)


def test_a_terminal_gets_a_progress_line_with_the_steps_and_figures(terminal):
    stream, written = terminal
    with progress("devmem: sizing", total=3, unit="run", stream=stream) as bar:
        bar.update(blocks=64)
        assert bar.shown
    out = written()
    assert "devmem: sizing" in out and "blocks=64" in out, out


def test_a_pipe_or_a_file_gets_nothing():
    stream = io.StringIO()
    with progress("devmem: sizing", total=3, stream=stream) as bar:
        bar.update(blocks=64)
        assert not bar.shown
    assert stream.getvalue() == ""


def test_without_tqdm_a_terminal_gets_nothing_and_nothing_fails(terminal, monkeypatch):
    stream, written = terminal
    monkeypatch.setitem(sys.modules, "tqdm", None)  # an install without tqdm: its import raises ImportError
    with progress("devmem: sizing", total=3, stream=stream) as bar:
        bar.update(blocks=64)
        assert not bar.shown
    assert written() == ""


def test_measuring_a_block_cost_shows_each_run_on_a_terminal(terminal, monkeypatch):
    stream, written = terminal
    monkeypatch.setattr(sys, "stderr", stream)

    def run(num_blocks: int) -> BlockRun:  # an engine whose peak grows by 150 bytes a block
        held = 1000 + 100 * num_blocks
        return BlockRun(num_blocks, held, held + 50 * num_blocks, held + 50 * num_blocks)

    measure_block_cost(run, [8, 16], plan=lambda cost: 20)
    out = written()
    assert "devmem: measuring a KV block's cost: 2/6 run [00:00, blocks=16]" in out, out


def test_work_inside_work_that_draws_a_line_draws_none_of_its_own(terminal):
    stream, written = terminal
    with progress("devmem: sizing", total=3, unit="run", stream=stream) as outer:
        with progress("devmem: measuring a KV block's cost", total=2, stream=stream) as inner:
            inner.update(blocks=8)
        assert outer.shown and not inner.shown
    with progress("devmem: measuring a KV block's cost", total=2, stream=stream) as after:
        assert after.shown  # the outer line is gone: the next work draws again
    assert "devmem: sizing" in written()


def test_work_without_a_total_counts_its_steps_alone(terminal):
    stream, written = terminal
    with progress("devmem top, every 2 s", unit="samples", stream=stream) as bar:
        bar.update()
        bar.update()
    assert "devmem top, every 2 s: 2 samples [00:00]" in written()


def last_line_of(text: str, words: str) -> str:
    """What the terminal shows on the line where ``words`` were written (a carriage return starts it again)."""
    return next(line for line in text.split("\n") if words in line).rstrip("\r").rsplit("\r", 1)[-1]


def test_a_warning_logged_while_the_line_is_drawn_goes_above_it(terminal):
    import logging

    stream, written = terminal
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    try:
        with progress("devmem: sizing", total=3, unit="run", stream=stream) as bar:
            bar.update()
            logging.getLogger("devmem.engine.profiling").warning("devmem: other processes moved 1.00 GiB")
            bar.update()
        assert logging.getLogger().handlers[-1] is handler  # the application's handler is back
    finally:
        logging.getLogger().removeHandler(handler)
    out = written()
    assert last_line_of(out, "other processes moved") == "devmem: other processes moved 1.00 GiB", repr(out)


def test_a_warning_python_writes_as_its_last_resort_goes_above_the_line_too(terminal, monkeypatch):
    import logging

    stream, written = terminal
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # no handler anywhere: Python's last resort writes it
    with progress("devmem: sizing", total=3, unit="run") as bar:
        bar.update()
        logging.getLogger("devmem.engine.profiling").warning("devmem: other processes moved 1.00 GiB")
    assert logging.getLogger("devmem").handlers == []
    out = written()
    assert last_line_of(out, "other processes moved") == "devmem: other processes moved 1.00 GiB", repr(out)
