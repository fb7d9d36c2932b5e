"""A progress line on stderr for work that takes seconds (block-cost runs, a model's sizing), through tqdm where it
is installed (transformers brings it): on a terminal only, and nothing at all through a pipe, into a log, or
without tqdm, so that no output a program reads ever changes. Work inside work that shows a line already (the
block-cost runs of a sizing) draws no second one: the outer line counts it. A log record written while a line is
drawn (a warning of a profile window) goes above the line, never into it.

    with progress("devmem: measuring a KV block's cost", total=6, unit="run") as bar:
        for n in sizes:
            run(n)
            bar.update(blocks=n)
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any

#: One short line: ``devmem: measuring a KV block's cost: 2/6 run [00:03, blocks=16]`` (no bar: the total is the
#: most steps there may be, not the steps there will be).
_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"
#: The line of work without a total (``devmem top`` until Ctrl-C): ``devmem top, every 2 s: 3 samples [00:06]``.
_FORMAT_OPEN = "{desc}: {n_fmt} {unit} [{elapsed}{postfix}]"
#: Whether a line is drawn in this thread (or task) now: a nested :func:`progress` draws none.
_drawing: ContextVar[bool] = ContextVar("devmem_progress_drawing", default=False)


class Progress:
    """One line of progress; :meth:`update` counts a step done (with ``key=value`` figures shown after it)."""

    def __init__(self, bar: Any = None) -> None:
        self._bar = bar

    @property
    def shown(self) -> bool:
        """Whether a line is drawn (a terminal with tqdm installed)."""
        return self._bar is not None

    def update(self, steps: int = 1, **figures: object) -> None:
        if self._bar is not None:
            if figures:
                self._bar.set_postfix(figures, refresh=False)
            self._bar.update(steps)
            self._bar.refresh()  # each step takes seconds: show it at once, not after tqdm's minimum interval


def _tqdm() -> Any:
    import importlib

    try:
        return importlib.import_module("tqdm").tqdm
    except ImportError:  # tqdm is optional: without it, no progress is shown
        return None


@contextmanager
def progress(
    description: str, total: int | None = None, *, unit: str = "step", stream: IO[str] | None = None
) -> Iterator[Progress]:
    """A :class:`Progress` for the block: a line on ``stream`` (stderr by default) while it runs when that is a
    terminal, tqdm is installed and no line is drawn already, removed when the block ends; else one whose updates
    do nothing. Without a ``total`` the line counts the steps alone."""
    stream = sys.stderr if stream is None else stream
    tqdm = _tqdm() if _is_terminal(stream) and not _drawing.get() else None
    if tqdm is None:
        yield Progress()
        return
    bar = tqdm(
        total=total,
        desc=description,
        unit=unit,
        file=stream,
        leave=False,
        dynamic_ncols=True,
        bar_format=_FORMAT if total is not None else _FORMAT_OPEN,
    )
    token = _drawing.set(True)
    try:
        with _logs_above(bar, stream):
            yield Progress(bar)
    finally:
        _drawing.reset(token)
        bar.close()


class _Above(logging.Handler):
    """A handler of the stream a line is drawn on, for as long as it is drawn: each record is written above the
    line (tqdm's ``write`` clears it, writes the record, draws it again), formatted and filtered as ``like``."""

    def __init__(self, bar: Any, like: logging.Handler) -> None:
        super().__init__(like.level)
        self.setFormatter(like.formatter)
        self.filters = list(like.filters)
        self._bar = bar
        self._stream = getattr(like, "stream", None)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._bar.write(self.format(record), file=self._stream)
        except Exception:
            self.handleError(record)


@contextmanager
def _logs_above(bar: Any, stream: IO[str]) -> Iterator[None]:
    """While ``bar`` is drawn on ``stream``, log records written there go above it, not into it: the root
    logger's and devmem's handlers of that stream are swapped for :class:`_Above`, and where no handler would
    take devmem's records (Python's last resort writes them to stderr) one is added to devmem's logger."""
    swapped: list[tuple[logging.Logger, logging.Handler, logging.Handler]] = []
    devmem = logging.getLogger("devmem")
    for logger in (logging.getLogger(), devmem):
        for handler in list(logger.handlers):
            if isinstance(handler, logging.StreamHandler) and handler.stream is stream:
                above: logging.Handler = _Above(bar, handler)
                logger.handlers[logger.handlers.index(handler)] = above
                swapped.append((logger, handler, above))
    added = None
    if logging.lastResort is not None and stream is sys.stderr and not _handled(devmem):
        added = _Above(bar, logging.lastResort)
        devmem.addHandler(added)
    try:
        yield
    finally:
        if added is not None:
            devmem.removeHandler(added)
        for logger, original, replacement in swapped:
            if replacement in logger.handlers:
                logger.handlers[logger.handlers.index(replacement)] = original


def _handled(logger: logging.Logger) -> bool:
    """Whether a record of ``logger`` reaches a handler (else Python's last resort writes it)."""
    current: logging.Logger | None = logger
    while current is not None:
        if current.handlers:
            return True
        current = current.parent if current.propagate else None
    return False


def _is_terminal(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False
