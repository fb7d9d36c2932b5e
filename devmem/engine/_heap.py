"""The heap frozen while an engine starts, so that the garbage collections its windows make stay cheap.

Each window edge collects garbage once (what a reference cycle keeps on the device must be freed before it is
measured). A full collection scans every object: with torch imported that is about 0.1 s on a 2-core machine, and
0.25 s with transformers, three times per start. The objects that existed before the start began hold none of its
device memory, so they are moved out of the collections' way (``gc.freeze``) while it runs: each collection then
scans only what the start created (the model, its activations), and one start's collections cost milliseconds.

Starts in one process share one freeze: the first :func:`hold` freezes, the last :func:`let_go` unfreezes. Where the
application froze objects itself (as servers do after start-up), its choice is kept: nothing is frozen or unfrozen
by devmem then. Nor is anything unfrozen where the application froze more while a start held the freeze (seen as
more objects frozen than devmem froze). Garbage
that existed before the start is not collected during it (it holds none of the start's memory) and is collected by
the interpreter's own collections once the start ends.
"""

from __future__ import annotations

import gc

from devmem._forksafe import ForkSafeLock

_lock = ForkSafeLock()
_holders = 0
#: What ``gc.get_freeze_count()`` was right after devmem froze the heap; ``None`` where devmem froze nothing.
_frozen_count: int | None = None


def hold() -> None:
    """One more start that wants the heap frozen: the first freezes it (unless the application froze objects)."""
    global _holders, _frozen_count
    with _lock:
        if _holders == 0:
            if gc.get_freeze_count():
                _frozen_count = None
            else:
                gc.freeze()
                _frozen_count = gc.get_freeze_count()
        _holders += 1


def let_go() -> None:
    """One start less: the last unfreezes what devmem froze, unless the application froze more meanwhile."""
    global _holders, _frozen_count
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            # frozen objects that died meanwhile lower the count; only the application freezing more raises it
            if _frozen_count is not None and gc.get_freeze_count() <= _frozen_count:
                gc.unfreeze()
            _frozen_count = None
