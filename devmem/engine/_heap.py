"""The heap frozen while an engine starts, so that the garbage collections its windows make stay cheap.

Each window edge collects garbage once (what a reference cycle keeps on the device must be freed before it is
measured). A full collection scans every object: with torch imported that is about 0.1 s on a 2-core machine, and
0.25 s with transformers, three times per start. The objects that existed before the start began hold none of its
device memory, so they are moved out of the collections' way (``gc.freeze``) while it runs: each collection then
scans only what the start created (the model, its activations), and one start's collections cost milliseconds.

Starts in one process share one freeze: the first :func:`hold` freezes, the last :func:`let_go` unfreezes. Where the
application froze objects itself before (as servers do after start-up), its choice is kept: nothing is frozen or
unfrozen by devmem then. What the application freezes while a start holds the freeze is unfrozen with the rest at
its end (counting the frozen objects to tell would cost a walk over all of them, 50 ms with torch imported). Garbage
that existed before the start is not collected during it (it holds none of the start's memory) and is collected by
the interpreter's own collections once the start ends.
"""

from __future__ import annotations

import gc

from devmem._forksafe import ForkSafeLock

_lock = ForkSafeLock(reentrant=True)  # a collection under it runs finalizers that let go
_holders = 0
#: Whether devmem froze the heap (and unfreezes it when the last start lets go).
_ours = False


def hold() -> None:
    """One more start that wants the heap frozen: the first freezes it (unless the application froze objects)."""
    global _holders, _ours
    with _lock:
        if _holders == 0:
            _ours = not gc.get_freeze_count()  # a walk over the frozen objects: none where nobody froze
            if _ours:
                gc.freeze()
        _holders += 1


def let_go() -> None:
    """One start less: the last unfreezes what devmem froze."""
    global _holders, _ours
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and _ours:
            gc.unfreeze()
            _ours = False


def collect_all() -> int:
    """A full collection, the frozen objects included (an engine dropped in a reference cycle while a start held the
    freeze was frozen with the rest): the heap frozen again after it where devmem froze it. Returns what
    ``gc.collect()`` found."""
    with _lock:
        if _ours:
            gc.unfreeze()
        try:
            return gc.collect()
        finally:
            if _ours:  # the last start may have let go in a finalizer the collection ran
                gc.freeze()
