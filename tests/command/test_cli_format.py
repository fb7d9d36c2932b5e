"""devmem.command.format: wrapping at word boundaries, sizes kept whole, colour only on a terminal without NO_COLOR."""

from __future__ import annotations

import io
import os
import pty

import pytest

from devmem.command.format import (
    PIPE_WIDTH,
    Painter,
    key_values,
    printable,
    table,
    terminal_width,
    wants_colour,
    width_for,
    wrap,
)


def test_wrap_never_separates_a_number_from_its_unit():
    lines = wrap("free is 22.79 GiB of 139.80 GiB and 9102 blocks fit", 24)
    assert lines == ["free is 22.79 GiB of", "139.80 GiB and", "9102 blocks fit"]


def test_wrap_never_cuts_a_word_longer_than_the_width():
    assert wrap("see GPU-5d4e3c2b-1a09-4f8e-9d7c-6b5a4f3e2d1c now", 20) == [
        "see",
        "GPU-5d4e3c2b-1a09-4f8e-9d7c-6b5a4f3e2d1c",
        "now",
    ]


def test_key_values_wrap_each_value_under_its_own_start():
    lines = key_values([("free from", "MemAvailable, includes 7.98 GiB reclaimable page cache"), ("x", "1 B")], 40)
    assert lines == [
        "  free from  MemAvailable, includes",
        "             7.98 GiB reclaimable page",
        "             cache",
        "  x          1 B",
    ]


def test_table_right_aligns_numbers_and_wraps_the_last_column():
    lines = table(("PID", "MEM", "COMMAND"), [("7", "2.00 GiB", "python -c import time")], 30, right=frozenset({0, 1}))
    assert lines == ["  PID       MEM  COMMAND", "    7  2.00 GiB  python -c", "                 import time"]


def test_terminal_width_follows_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "101")
    assert terminal_width() == 101


def test_a_terminal_wants_colour(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w") as tty:
            assert wants_colour(tty)
    finally:
        os.close(leader)


@pytest.mark.parametrize("value", ["1", "yes", "0"])
def test_no_color_with_any_value_turns_colour_off_on_a_terminal(monkeypatch, value):
    monkeypatch.setenv("NO_COLOR", value)
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w") as tty:
            assert not wants_colour(tty)
    finally:
        os.close(leader)


def test_a_pipe_or_buffer_gets_no_colour(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    read, write = os.pipe()
    with os.fdopen(write, "w") as pipe:
        assert not wants_colour(pipe) and not wants_colour(io.StringIO())
    os.close(read)


def test_painter_leaves_text_alone_when_colour_is_off():
    assert Painter(False)("WARN", "yellow") == "WARN" and Painter(True)("WARN", "yellow") == "\x1b[33mWARN\x1b[0m"


@pytest.mark.parametrize("columns", ["0", "-5", "", "\u0663\u0663"])
def test_columns_that_is_not_a_width_gives_a_pipe_80_columns(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert width_for(io.StringIO()) == PIPE_WIDTH == 80


def test_columns_above_0_wraps_a_pipe(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert width_for(io.StringIO()) == 60


def test_printable_shows_control_characters_and_bidi_overrides_as_escapes():
    assert printable("a\x1b[2Jb\x07c\nd\u202ee\x9bf \u00e9") == "a\\x1b[2Jb\\x07c\\nd\\u202ee\\x9bf \u00e9"


def _pty(rows: int):
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 80, 0, 0))
    return leader, os.fdopen(follower, "w")


@pytest.mark.parametrize(("rows", "height"), [(30, 30), (0, 24)], ids=["30 rows", "a size not set"])
def test_a_screen_takes_the_terminals_height(monkeypatch, rows, height):
    from devmem.command.format import height_for

    monkeypatch.delenv("LINES", raising=False)
    leader, terminal = _pty(rows)
    try:
        assert height_for(terminal) == height
    finally:
        terminal.close()
        os.close(leader)


def test_lines_sets_a_screens_height_and_a_pipe_has_none(monkeypatch):
    from devmem.command.format import height_for

    monkeypatch.delenv("LINES", raising=False)
    assert height_for(io.StringIO()) is None
    monkeypatch.setenv("LINES", "12")
    assert height_for(io.StringIO()) == 12
