"""Key presses while ``devmem top`` or ``--watch`` redraws a terminal: ``q`` quits, as in top, htop and nvitop.

Only a terminal's stdin is read, one key at a time (cbreak mode: no Enter needed, Ctrl-C still a signal), and its
mode is restored when the screen ends; from a pipe or a file nothing is read and the wait is a plain sleep.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time

#: The keys that end the screen (exit 0).
QUIT_KEYS = frozenset("qQ")


class Keys:
    """``keys.start()``, then ``keys.wait(seconds)`` between samples (True: a quit key was pressed), and
    ``keys.restore()`` at the end (in a ``finally``)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._saved: list | None = None

    @property
    def reading(self) -> bool:
        """Whether key presses are read (stdin is a terminal)."""
        return self._fd is not None

    def start(self) -> None:
        """Read stdin's keys from now on, where it is a terminal."""
        try:
            import termios
            import tty

            fd = sys.stdin.fileno()
            if os.isatty(fd):
                self._saved = termios.tcgetattr(fd)
                tty.setcbreak(fd)
                self._fd = fd
        except (AttributeError, ValueError, OSError, ImportError):  # no stdin, a closed one, or no termios
            self._fd = None

    def restore(self) -> None:
        """The terminal's mode as it was before :meth:`start`."""
        if self._fd is not None and self._saved is not None:
            import termios

            with contextlib.suppress(OSError):  # the terminal went away
                termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds``; True at once when a quit key is pressed meanwhile (other keys are ignored)."""
        deadline = time.monotonic() + max(0.0, seconds)
        if self._fd is None:
            time.sleep(max(0.0, seconds))
            return False
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                key = os.read(self._fd, 1).decode(errors="replace")
                if not key or key in QUIT_KEYS:  # end of input, or q
                    return bool(key)
        return False
