"""The switch that turns an adapter off, and the gate on the engine's release: :class:`Switch` (its environment
variable and :meth:`Switch.admits`), :func:`installed_version`, :func:`release` and :func:`version_note`."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from importlib import metadata

#: The values that turn an adapter off, and those that leave it on without a warning.
OFF = ("0", "false", "no", "off")
ON = ("", "1", "true", "yes", "on")


class Switch:
    """The environment variable ``env`` that turns the adapter for ``engine`` off, the gate on the engine's release
    (:meth:`admits`), and the warning that the engine runs as it came (:meth:`declined`)."""

    def __init__(self, env: str, engine: str, log: logging.Logger):
        self.env, self.engine, self.log = env, engine, log

    def on(self, environ: Mapping[str, str] | None = None) -> bool:
        """Whether the adapter runs: logs one line where the variable turns it off, one warning where its value is
        none of the known ones (the adapter stays on)."""
        value = (os.environ if environ is None else environ).get(self.env, "1")
        normal = value.strip().lower()
        if normal in OFF:
            self.log.info("devmem: %s=%s, %s sizes its KV cache itself", self.env, value, self.engine)
            return False
        if normal not in ON:
            self.log.warning(
                "devmem: %s=%r is none of %s (on) or %s (off); the plugin stays on",
                self.env,
                value[:80],
                ", ".join(ON[1:]),
                ", ".join(OFF),
            )
        return True

    def admits(
        self, distribution: str, module: str, oldest: tuple[int, int], verified: Sequence[tuple[int, int]]
    ) -> tuple[bool, str | None]:
        """Whether the adapter runs: the switch on (:meth:`on`), and the installed release (:func:`installed_version`
        of ``distribution``, else ``module.__version__``) admitted by :func:`version_note` (one warning where it is
        declined); and the note to log once the engine is patched."""
        if not self.on():
            return False, None
        go, note = version_note(self.engine, installed_version(distribution, module), oldest, verified)
        if not go:
            self.declined(str(note))
        return go, note

    def declined(self, why: str) -> None:
        """One warning: ``why`` the adapter leaves the engine as it came, which then sizes its KV cache itself."""
        self.log.warning("devmem: %s; %s sizes its KV cache itself", why, self.engine)


def installed_version(distribution: str, module: str) -> str | None:
    """The installed release of ``distribution`` (``module.__version__`` for a copy without metadata); ``None``
    where neither is there."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pass
    try:
        found = __import__(module, fromlist=["__version__"])
    except Exception:  # a broken engine install is "not there" to the adapter, never an error in it
        return None
    version = getattr(found, "__version__", None)
    return str(version) if version is not None else None


def release(version: str) -> tuple[int, ...] | None:
    """The numeric release of ``version`` (``"0.26.0rc1"`` -> ``(0, 26, 0)``); ``None`` where it starts with none."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts) or None


def version_note(
    engine: str, version: str | None, oldest: tuple[int, int], verified: Sequence[tuple[int, int]]
) -> tuple[bool, str | None]:
    """Whether to patch ``engine``'s release ``version``, and the one line to log: a warning where it is declined
    (none installed, no release, older than ``oldest``), an info line where it is newer than the newest of
    ``verified`` (tried, since its shapes are checked next); ``None`` for a release up to the newest verified."""
    if version is None:
        return False, f"{engine} is not installed"
    found = release(version)
    if found is None or len(found) < 2:
        return False, f"{engine} {version!r} is not a release this plugin knows"
    if found[:2] < oldest:
        return False, f"{engine} {version} is older than {oldest[0]}.{oldest[1]}, the first release this plugin knows"
    newest = max(verified)
    if found[:2] > newest:
        return True, (
            f"{engine} {version} is newer than {newest[0]}.{newest[1]}, the newest release this plugin was verified "
            "on: tried, since the methods it patches have the shapes the plugin knows"
        )
    return True, None
