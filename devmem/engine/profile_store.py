"""Measure once, start fast: figures an engine measured, kept on disk under a key of everything that changes them.

An engine that sizes its cache by running itself (:mod:`devmem.engine.block_cost`) takes seconds; the figures depend
only on what the engine runs and where (model and engine configuration, device, driver, library versions,
allocator settings). :class:`ProfileStore` keeps them in one JSON file per key: a restart with the same key reads
them back, any changed field measures again. A file of another format, version or key is ignored with one
warning (and measured over). A file of this format that is broken (unreadable, not a regular file, not JSON, a
``created`` time that is no finite number of seconds from the epoch to a day from now, figures the reader's
``check`` refuses) is named in one warning and set aside, renamed ``<name>.bad-<seconds since the epoch>`` in the
same folder (kept for a person to look at; devmem never reads it again), so that the next start measures and
stores afresh. The folder is ``directory`` if given, else ``$DEVMEM_PROFILE_DIR``, else
``$XDG_CACHE_HOME/devmem/profiles`` (``~/.cache/devmem/profiles``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devmem._text import env_text, shown
from devmem.engine._state_files import SAFE_FLAGS, regular_fd
from devmem.engine.block_cost import BlockCost, BlockRun, growth_per_block
from devmem.errors import ProfileStoreError

log = logging.getLogger("devmem.engine.profile_store")

#: The variable naming the folder the profiles are kept in.
ENV = "DEVMEM_PROFILE_DIR"
#: What every stored file says it is; a file without it is not one of these.
FORMAT = "devmem-profile"
#: The layout of a stored file; a file of another version is measured over.
VERSION = 1
#: A stored file larger than this is not one of these (and is not read).
MAX_FILE_BYTES = 1 << 22
#: A stored file's ``created`` time may be this many seconds ahead of this machine's clock (clocks of hosts that
#: share a folder disagree); one further in the future was not written by a clock.
FUTURE_SLACK = 86400.0
#: No stored figure of bytes reaches this (16 EiB).
FIGURE_LIMIT = 1 << 64

#: What a reader's ``check`` says of the figures it reads: why they are not what it stores (``None``: they are).
Check = Callable[[dict[str, Any]], "str | None"]


def default_directory() -> Path:
    """``$DEVMEM_PROFILE_DIR``, else ``$XDG_CACHE_HOME/devmem/profiles``, else ``~/.cache/devmem/profiles``."""
    named = env_text(ENV, error=ProfileStoreError)
    if named:
        return Path(named).expanduser()
    xdg = env_text("XDG_CACHE_HOME", error=ProfileStoreError)
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "devmem" / "profiles"


def canonical(key: Mapping[str, Any]) -> str:
    """The key as canonical JSON (sorted keys, no spaces), one text per key: plain data (mappings of text to
    values, lists, text, numbers, ``True``/``False``/``None``) is written as JSON writes it, and what JSON would
    write as something else is tagged (:func:`_tagged`), so that no two keys share a text, and a profile measured
    for one configuration is never read back for another."""
    if not isinstance(key, Mapping) or not key:
        raise ProfileStoreError(f"a profile key must be a non-empty mapping of names to values, got {shown(key)}")
    try:
        return json.dumps(_tagged(key), sort_keys=True, separators=(",", ":"))
    except Exception as exc:  # a circular or too deeply nested key, a value whose repr() raises
        raise ProfileStoreError(
            f"a profile key must be plain data that JSON can write ({type(exc).__name__}: {exc})"
        ) from None


#: The first character of a tag in a canonical key; a mapping's own name that starts with it is written doubled.
_TAG = "~"


def _tagged(value: Any, within: frozenset[int] = frozenset()) -> Any:
    """``value`` as JSON data that tells apart what JSON alone would not: a tuple from a list (``{"~tuple": [...]}``),
    a mapping with names other than text from one with text names (``{"~dict": [[name, value], ...]}``, ``{1: x}``
    from ``{"1": x}``), a set (``{"~set": [...]}``, in a fixed order), and any other object from the text of its
    ``repr`` (``{"~repr:<module>.<class>": repr}``: ``torch.float16`` from ``"torch.float16"``); a mapping's
    own name starting with ``~`` is written with it doubled. ``within``: the containers holding ``value`` (one of
    them again is a circular reference: ``ValueError``)."""
    if value is None or type(value) in (str, bool, int, float):
        return value
    if id(value) in within:
        raise ValueError("Circular reference detected")
    inner = within | {id(value)}
    if type(value) is list:
        return [_tagged(v, inner) for v in value]
    if isinstance(value, Mapping):
        if all(type(k) is str for k in value):
            return {(_TAG + k if k.startswith(_TAG) else k): _tagged(v, inner) for k, v in value.items()}
        pairs = [[_tagged(k, inner), _tagged(v, inner)] for k, v in value.items()]
        return {f"{_TAG}dict": sorted(pairs, key=lambda pair: json.dumps(pair[0], sort_keys=True))}
    if type(value) is tuple:
        return {f"{_TAG}tuple": [_tagged(v, inner) for v in value]}
    if isinstance(value, (set, frozenset)):
        items = (_tagged(v, inner) for v in value)
        return {f"{_TAG}set": sorted(items, key=lambda v: json.dumps(v, sort_keys=True))}
    kind = type(value)
    return {f"{_TAG}repr:{kind.__module__}.{kind.__qualname__}": repr(value)}


@dataclass(frozen=True)
class StoredProfile:
    """Figures read back from ``path``, stored under ``key`` (``created``: seconds since the epoch)."""

    kind: str
    key: dict[str, Any]
    figures: dict[str, Any]
    path: Path
    created: float


class ProfileStore:
    """One JSON file per ``kind`` and key under ``directory`` (see :func:`default_directory`)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        if directory is not None and not isinstance(directory, (str, os.PathLike)):
            raise ProfileStoreError(f"directory must be a path (str or os.PathLike) or None, got {shown(directory)}")
        if directory is not None and not str(os.fspath(directory)).strip():
            raise ProfileStoreError("directory must name a folder, got an empty path")
        if directory is not None and "\0" in str(os.fspath(directory)):  # no path holds one: every call would raise
            raise ProfileStoreError(
                f"directory must be a path without a NUL character, got {shown(os.fspath(directory))}"
            )
        self.directory = Path(directory).expanduser() if directory is not None else default_directory()

    def __repr__(self) -> str:
        return f"ProfileStore({str(self.directory)!r})"

    def path(self, kind: str, key: Mapping[str, Any]) -> Path:
        """The file the figures of ``kind`` under ``key`` live in."""
        if not isinstance(kind, str) or not kind.replace("_", "").replace("-", "").isalnum():
            raise ProfileStoreError(f"kind must be a name of letters, digits, '-' and '_', got {kind!r}")
        digest = hashlib.sha256(canonical(key).encode()).hexdigest()[:32]
        return self.directory / f"{kind}-{digest}.json"

    def load(self, kind: str, key: Mapping[str, Any], check: Check | None = None) -> StoredProfile | None:
        """The figures stored for ``kind`` under ``key``, or ``None``: none stored, or a file of another format,
        version or key (one warning says which), or a broken one: unreadable, not JSON, a bad ``created`` time, or
        figures that ``check`` (where given) refuses, set aside with one warning naming it (module docstring)."""
        path = self.path(kind, key)
        wanted = json.loads(canonical(key))
        identity = None
        try:  # a FIFO, a device or a link to one in its place is refused, not read (it would block or never end)
            raw, identity = _read(path)
            data = json.loads(raw.decode("utf-8"))
        except (FileNotFoundError, NotADirectoryError):  # nothing stored (a file in the folder's place: save says)
            return None
        except (OSError, ValueError, RecursionError) as exc:
            _set_aside(path, identity, str(exc) or type(exc).__name__)
            return None
        why = _foreign(data, kind, wanted)
        if why:
            log.warning("devmem: ignoring the stored profile %s: %s; measuring again", path, why)
            return None
        problem = _envelope_problem(data)
        if problem is None and check is not None:
            try:
                problem = check(data["figures"])
            except (KeyError, TypeError, ValueError, ArithmeticError) as exc:  # a check that met what it did not expect
                problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            _set_aside(path, identity, problem)
            return None
        return StoredProfile(kind, wanted, data["figures"], path, float(data["created"]))

    def save(self, kind: str, key: Mapping[str, Any], figures: Mapping[str, Any], created: float) -> Path | None:
        """Write ``figures`` for ``kind`` under ``key`` (atomically: a reader sees the old file or the new one);
        returns the path, or ``None`` with a warning where the folder cannot be written."""
        return self._write(kind, key, figures, created, replace=True)[0]

    def save_first(
        self,
        kind: str,
        key: Mapping[str, Any],
        figures: Mapping[str, Any],
        created: float,
        check: Check | None = None,
    ) -> tuple[StoredProfile | None, bool]:
        """Store ``figures`` unless valid figures of ``kind`` are already stored under ``key`` (engines with the
        same key that measured at the same time: the first to store wins). Returns what the key holds now and
        whether it is these figures: ``(theirs, False)`` where another process stored first, so that every
        engine of one key can use one set of figures; ``(None, False)`` with a warning where the folder cannot
        be written. A file that :meth:`load` (with ``check``) ignores or sets aside is replaced."""
        path, ours = self._write(kind, key, figures, created, replace=False)
        if path is None:
            return None, False
        if ours:
            return StoredProfile(kind, json.loads(canonical(key)), dict(figures), path, created), True
        theirs = self.load(kind, key, check)
        if theirs is not None:
            return theirs, False
        path, ours = self._write(kind, key, figures, created, replace=True)
        if path is None:
            return None, False
        return StoredProfile(kind, json.loads(canonical(key)), dict(figures), path, created), True

    def _write(
        self, kind: str, key: Mapping[str, Any], figures: Mapping[str, Any], created: float, replace: bool
    ) -> tuple[Path | None, bool]:
        """(path, whether these figures are in it): written through a temporary file renamed into place, or,
        with ``replace=False``, linked into place only where no file is there yet (``False`` where one was)."""
        path = self.path(kind, key)
        body = {
            "format": FORMAT,
            "version": VERSION,
            "kind": kind,
            "created": created,
            "key": json.loads(canonical(key)),
            "figures": figures,
        }
        try:
            text = json.dumps(body, indent=1, sort_keys=True)
            if len(text.encode()) > MAX_FILE_BYTES:  # load would ignore it
                raise ValueError(f"the key and figures take more than {MAX_FILE_BYTES} bytes")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                if replace:
                    os.replace(tmp, path)
                else:
                    try:
                        os.link(tmp, path)  # atomic, and refuses where the file exists
                    except FileExistsError:
                        return path, False
                    except OSError:  # a filesystem without hard links: the rename, where nothing is there yet
                        with _locked(path):  # checked and renamed under a lock, so that one process wins
                            if path.exists():
                                return path, False
                            os.replace(tmp, path)
                    finally:
                        Path(tmp).unlink(missing_ok=True)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except (OSError, TypeError, ValueError) as exc:
            log.warning("devmem: could not store the profile in %s (%s); the next start measures again", path, exc)
            return None, False
        return path, True


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """``flock`` on ``.<name>.lock`` beside ``path``, for the check-and-rename of filesystems without hard links."""
    lock = path.parent / f".{path.name}.lock"
    fd = regular_fd(os.open(lock, os.O_RDONLY | os.O_CREAT | SAFE_FLAGS, 0o644), lock)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> tuple[bytes, tuple[int, int]]:
    """The bytes of the regular file ``path`` (at most :data:`MAX_FILE_BYTES`) and its identity (device, inode)."""
    fd = regular_fd(os.open(path, os.O_RDONLY | (SAFE_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))), path)
    with os.fdopen(fd, "rb") as f:
        identity = os.fstat(f.fileno())
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    return data, (identity.st_dev, identity.st_ino)


def _set_aside(path: Path, identity: tuple[int, int] | None, problem: str) -> None:
    """Rename the broken file at ``path`` to ``<name>.bad-<seconds>`` beside it, with one warning naming both; a
    file that is no longer the one read (``identity``: another process stored a new one meanwhile) is left."""
    aside = path.with_name(f"{path.name}.bad-{int(time.time())}")
    try:
        now = os.stat(path)
        if identity is not None and (now.st_dev, now.st_ino) != identity:
            return
        os.rename(path, aside)
    except FileNotFoundError:  # another process set it aside first
        return
    except OSError as exc:
        log.warning(
            "devmem: ignoring the stored profile %s (%s); could not set it aside (%s); measuring again",
            path,
            problem,
            exc,
        )
        return
    kind = "folder" if stat.S_ISDIR(now.st_mode) else "file"
    log.warning(
        "devmem: ignoring the stored profile %s (%s); the %s is set aside as %s; measuring again",
        path,
        problem,
        kind,
        aside.name,
    )


def _envelope_problem(data: dict[str, Any]) -> str | None:
    """Why the envelope of a stored file of this format is broken (``None``: it is not)."""
    if not isinstance(data.get("figures"), dict):
        return f"its figures are {shown(data.get('figures'))}, not a mapping"
    created = data.get("created")
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        return f"its created time is {shown(created)}, not a number of seconds"
    if not (math.isfinite(created) and 0 <= created <= time.time() + FUTURE_SLACK):
        return f"its created time {shown(created)} is no time from the epoch to a day from now"
    return None


def whole_figure(name: str, value: object, *, low: int = 0, high: int = FIGURE_LIMIT - 1) -> str | None:
    """Why ``value``, the stored figure ``name``, is not a whole number from ``low`` to ``high`` (a JSON integer,
    not a ``bool``); ``None`` where it is. The one check of the figures a stored profile's readers make."""
    if type(value) is not int:
        return f"{name} is {shown(value)}, not a whole number"
    if not low <= value <= high:
        return f"{name} is {shown(value)}, outside {low}..{high}"
    return None


def _foreign(data: object, kind: str, key: object) -> str | None:
    """Why ``data`` is not the stored figures of ``kind`` under ``key`` (``None``: it is)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return f"not a {FORMAT} file"
    if data.get("version") != VERSION:
        return f"layout version {shown(data.get('version'))}, this devmem reads {VERSION}"
    if data.get("kind") != kind:
        return f"figures of {shown(data.get('kind'))}, not {kind!r}"
    if data.get("key") != key:
        return "stored under another key"
    return None


#: The kind under which :class:`devmem.EngineMemory` keeps a measured block cost, or a whole start
#: (:class:`StoredStart`).
BLOCK_COST_KIND = "block-cost"

#: The least a stored block may cost: a block holds the keys and values of at least one token on every layer, and
#: one head of 64 fp16 dimensions alone is 256 bytes of them per token and layer. A stored cost below it was not
#: measured (a block cost of 1 byte would plan millions of blocks).
MIN_STORED_BLOCK_BYTES = 256

#: The windows' figures a stored start holds, and whether each may be unknown (``None``).
WINDOW_FIGURES = {
    "consumed": False,
    "weights": False,
    "transient_peak_bytes": False,
    "non_torch": False,
    "other_processes": True,
    "released_cache": False,
}

#: The fields of a stored :class:`~devmem.engine.block_cost.BlockRun` and whether each may be unknown (``None``).
RUN_FIGURES = {"num_blocks": False, "held_bytes": False, "peak_bytes": True, "reserved_peak_bytes": True}


@dataclass(frozen=True)
class StoredStart:
    """What :class:`devmem.EngineMemory` keeps under a key (kind :data:`BLOCK_COST_KIND`): a block's measured
    ``cost`` and, for a whole start (:meth:`EngineMemory.save_profile <devmem.EngineMemory.save_profile>`), the
    windows' figures the plan is made of (``windows``: ``plan_kv_cache``'s inputs), whether the first run was the
    profile window's, whether torch's allocator mapped expandable segments, and the engine's own ``extra``.

    :meth:`check` is the one check of what is read back (:meth:`ProfileStore.load`'s ``check``): the figures' shape,
    types and ranges, and what a device of that total can hold; :meth:`read` then builds the record, and
    :meth:`figures` is what is written.
    """

    cost: BlockCost
    windows: Mapping[str, Any] | None = None
    first_in_window: bool = False
    expandable_segments: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def check(total: int, accept: Callable[[Mapping[str, Any]], bool] | None = None) -> Check:
        """The check of figures stored on a device of ``total`` bytes; ``accept`` the engine's ``extra`` (``False``,
        or a ``ValueError`` saying why, refuses it), beside a whole start."""

        def check(figures: dict[str, Any]) -> str | None:
            problem = _cost_problem(figures, total)
            if problem is None and figures.get("windows") is not None:
                problem = _windows_problem(figures, total)
                if problem is None and accept is not None:
                    try:
                        if not accept(figures.get("extra", {})):
                            problem = "the engine cannot read what it kept beside the figures (extra)"
                    except ValueError as exc:  # the engine's accept saying why
                        problem = str(exc)
            return problem

        return check

    @classmethod
    def read(cls, stored: StoredProfile) -> StoredStart:
        """The record of ``stored``, whose figures passed :meth:`check`."""
        figures = stored.figures
        runs = tuple(BlockRun(**r) for r in figures["runs"])
        cost = BlockCost(figures["block_bytes"], runs, figures["linear"], tuple(figures.get("notes", ())))
        raw = figures.get("windows")
        windows = None
        if raw is not None:
            windows = {name: raw[name] for name in WINDOW_FIGURES}
            if "graph_capture" in raw:
                windows["graph_capture"] = raw["graph_capture"]
            windows["allocator"] = raw.get("allocator", "caching")  # what the window saw
        return cls(
            cost,
            windows,
            bool(figures.get("first_in_window", False)),
            bool(figures.get("expandable_segments", False)),
            dict(figures.get("extra", {})),
        )

    def figures(self) -> dict[str, Any]:
        """The record as the JSON figures :meth:`ProfileStore.save` writes."""
        cost = self.cost
        return {
            "block_bytes": cost.block_bytes,
            "linear": cost.linear,
            "runs": [vars(r) for r in cost.runs],
            "notes": list(cost.notes),
            "windows": None if self.windows is None else dict(self.windows),
            "first_in_window": self.first_in_window,
            "expandable_segments": self.expandable_segments,
            "extra": dict(self.extra),
        }


def _cost_problem(figures: dict[str, Any], total: int) -> str | None:
    """Why ``figures`` hold no block cost a device of ``total`` bytes could have measured (``None``: they do)."""
    runs = figures.get("runs")
    if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, dict) for r in runs):
        return f"runs is {shown(runs)}, not a list of at least two runs"
    for i, r in enumerate(runs):
        if set(r) - set(RUN_FIGURES) or "num_blocks" not in r or "held_bytes" not in r:
            return f"runs[{i}] has the fields {sorted(r)}, not {list(RUN_FIGURES)}"
        for name, may_be_none in RUN_FIGURES.items():
            value = r.get(name)
            if not (value is None and may_be_none):
                problem = whole_figure(f"runs[{i}].{name}", value, low=int(name == "num_blocks"), high=total)
                if problem:
                    return f"{problem} (a run on a device of {total} bytes)"
    counts = [r["num_blocks"] for r in runs]
    if any(b <= a for a, b in zip(counts, counts[1:], strict=False)):
        return f"the runs' block counts {counts} do not ascend"
    problem = whole_figure("block_bytes", figures.get("block_bytes"), low=MIN_STORED_BLOCK_BYTES, high=total)
    if problem:
        return f"{problem} (a block on a device of {total} bytes)"
    block = figures["block_bytes"]
    if counts[-1] > total // block:
        return f"its largest run holds {counts[-1]} blocks of {block} bytes, more than the device's {total} bytes hold"
    measured = growth_per_block(BlockRun(**runs[-2]), BlockRun(**runs[-1]))
    if block < measured:
        return f"block_bytes is {block}, below the {measured} bytes its own last two runs grew by per block"
    if type(figures.get("linear")) is not bool:
        return f"linear is {shown(figures.get('linear'))}, not true or false"
    notes = figures.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return f"notes is {shown(notes)}, not a list of text"
    return None


def _windows_problem(figures: dict[str, Any], total: int) -> str | None:
    """Why the windows' figures of a whole stored start are not ones a device of ``total`` bytes measured."""
    windows, extra = figures["windows"], figures.get("extra", {})
    if not isinstance(windows, dict) or not isinstance(extra, dict):
        return "its windows' figures or extra are not mappings"
    missing = [name for name in WINDOW_FIGURES if name not in windows]
    if missing:  # one that may be unknown is stored as null, never left out
        return f"its windows' figures lack {', '.join(missing)}"
    for name, may_be_none in {**WINDOW_FIGURES, "graph_capture": False}.items():
        value = windows.get(name, 0 if name == "graph_capture" else None)
        if not (value is None and may_be_none):
            problem = whole_figure(f"windows.{name}", value, high=total)
            if problem:
                return f"{problem} (bytes of a device of {total} bytes)"
    if windows["consumed"] < windows["weights"] or windows["consumed"] < windows["non_torch"]:
        return (
            f"windows.consumed is {windows['consumed']}, below the weights ({windows['weights']}) or the memory "
            f"outside torch ({windows['non_torch']}) it holds"
        )
    if windows.get("allocator", "caching") not in (None, "caching", "expandable"):
        return f"windows.allocator is {shown(windows['allocator'])}, not null, 'caching' or 'expandable'"
    for flag in ("first_in_window", "expandable_segments"):
        if type(figures.get(flag, False)) is not bool:
            return f"{flag} is {shown(figures[flag])}, not true or false"
    return None


def resolve_store(store: ProfileStore | str | os.PathLike[str] | bool | None) -> ProfileStore | None:
    """The store an entry point's ``store`` argument names: ``None`` or ``True`` the default folder, a path that
    folder, ``False`` none (measure every time), a :class:`ProfileStore` itself."""
    if isinstance(store, ProfileStore):
        return store
    if store is False:
        return None
    if store is None or store is True:
        return ProfileStore()
    if isinstance(store, (str, os.PathLike)):
        return ProfileStore(store)
    raise ProfileStoreError(
        f"store must be a ProfileStore, a folder (str or os.PathLike), True/None (the default folder) or False "
        f"(measure every time), got {store!r}"
    )


__all__ = [
    "BLOCK_COST_KIND",
    "ENV",
    "MIN_STORED_BLOCK_BYTES",
    "StoredStart",
    "ProfileStore",
    "ProfileStoreError",
    "StoredProfile",
    "default_directory",
    "resolve_store",
    "whole_figure",
]
