"""Where the ``devmem`` command writes: one writer for stdout that keeps the command's exit code.

A reader that went away (``devmem fit ... | true``, ``| head``) or a closed stdout (``>&-``) drops the rest of
the output silently: the command still returns its verdict (``fit`` exits 1 for a target that does not fit), and
``top`` stops. Any other write error (a full disk: ``devmem info > /dev/full``) is one :class:`OutputError` line.
Which escape sequences a stream may get is :mod:`devmem.command.format`'s business; what reaches a stream goes
through :func:`for_terminal` at its sink (stdout, error lines and log lines): every string from a config, a ledger
or another process is escaped there, wherever it was put in a line, and only devmem's own colours and cursor
moves reach the terminal.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
from typing import IO

from devmem._text import printable
from devmem.types import DevmemError

#: errno values that mean nobody reads the stream any more.
_READER_GONE = frozenset({errno.EPIPE, errno.EBADF, errno.ECONNRESET})


#: No stream: the reader of none has gone.
_NOWHERE = object()


#: The escape sequences of devmem's own colours (:class:`devmem.command.format.Painter`): the only ones a line keeps.
_OWN_STYLES = re.compile(r"\x1b\[(?:0|1|2|31|32|33)m")


def for_terminal(text: str) -> str:
    """``text`` as it may reach a terminal or a log: each control character, escape sequence, bidirectional
    override and lone surrogate shown as its escape (:func:`devmem._text.printable`), whoever put it in the line,
    except line breaks and devmem's own colours; so no config, ledger entry or process can retitle, clear or move
    the terminal, or stop a write."""
    lines = []
    for line in text.split("\n"):
        parts = _OWN_STYLES.split(line)
        styles = _OWN_STYLES.findall(line)
        lines.append("".join(printable(part) + (styles[i] if i < len(styles) else "") for i, part in enumerate(parts)))
    return "\n".join(lines)


class OutputError(DevmemError):
    """stdout cannot take the output (a full disk, an I/O error); not raised when its reader went away."""


def _silence(stream: IO[str]) -> None:
    """Point ``stream``'s file descriptor at /dev/null, so the interpreter's flush at exit raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


class Output:
    """stdout for the CLI, looked up at each write (tests swap ``sys.stdout``); :attr:`lost` once its reader is
    gone, for that stream only."""

    def __init__(self) -> None:
        self._lost_on: object = _NOWHERE

    @property
    def lost(self) -> bool:
        """Whether the current stdout's reader went away (or stdout is closed): writes to it are dropped."""
        return sys.stdout is None or self._lost_on is sys.stdout

    def write(self, text: str) -> None:
        """Write and flush ``text`` (through :func:`for_terminal`): dropped once the reader is gone,
        :class:`OutputError` on any other failure."""
        self._put(for_terminal(text))

    def frame(self, lines: list[str], *, first: bool) -> None:
        """``lines`` (each through :func:`for_terminal`) drawn over the previous frame from the screen's top-left
        corner, each line erased before it is written and the rest of the screen erased after the last; the
        ``first`` clears the screen (as ``clear`` does). These are the only cursor moves devmem writes. Nothing of a
        frame reaches the terminal's scrollback: the screen is not cleared again (tmux's ``scroll-on-clear`` keeps a
        cleared screen in its history), a frame is shorter than the terminal, and the terminal's line wrap is off
        while it is drawn (a line wider than a terminal just made narrower is cut there), so nothing scrolls."""
        start = "\x1b[?7l" + ("\x1b[H\x1b[2J" if first else "\x1b[H")
        self._put(start + "".join(f"\x1b[K{for_terminal(line)}\n" for line in lines) + "\x1b[J\x1b[?7h")

    def _put(self, text: str) -> None:
        stream = sys.stdout
        if self.lost:  # also: started with fd 1 closed (sys.stdout is None)
            return
        try:
            stream.write(text)
            stream.flush()
        except ValueError:  # a stream closed under us
            self._lost_on = stream
        except OSError as exc:
            _silence(stream)
            if isinstance(exc, BrokenPipeError) or exc.errno in _READER_GONE:
                self._lost_on = stream
                return
            reason = exc.strerror or type(exc).__name__
            raise OutputError(f"cannot write the output to stdout: {reason} (errno {exc.errno})") from None

    def print(self, *lines: str) -> None:
        self.write("".join(f"{line}\n" for line in lines))


def fitted_to_stderr(text: str) -> str:
    """``text`` wrapped to stderr's width: the terminal's on a terminal, ``COLUMNS`` where it is set, else whole
    (a log keeps each line)."""
    from devmem.command.format import UNWRAPPED, prose_width, wrap

    width = prose_width(sys.stderr)
    if width >= UNWRAPPED:
        return text
    return "\n".join(line for part in text.splitlines() for line in wrap(part, width, "", "  ", break_long=True))


class StderrFormatter(logging.Formatter):
    """The CLI's log lines (a warning about ``DEVMEM_LOAD_PLUGINS``, a ledger that cannot be read), each wrapped
    as :func:`error_line` wraps an error."""

    def format(self, record: logging.LogRecord) -> str:
        return fitted_to_stderr(for_terminal(super().format(record)))


def error_line(text: str) -> None:
    """``text`` on stderr, wrapped by :func:`fitted_to_stderr`; nothing when stderr is gone too."""
    stream = sys.stderr
    if stream is None:
        return
    text = fitted_to_stderr(for_terminal(text))
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass
