"""A progress line on stderr for work that takes seconds (block-cost runs, a model's sizing), through tqdm where it
is installed (transformers brings it): on a terminal only, and nothing at all through a pipe, into a log, or
without tqdm, so that no output a program reads ever changes. Work inside work that shows a line already (the
block-cost runs of a sizing) draws no second one: the outer line counts it.

    with progress("devmem: measuring a KV block's cost", total=6, unit="run") as bar:
        for n in sizes:
            run(n)
            bar.update(blocks=n)
"""

from __future__ import annotations

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
        yield Progress(bar)
    finally:
        _drawing.reset(token)
        bar.close()


def _is_terminal(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False
