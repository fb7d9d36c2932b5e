"""devmem's unified-memory platform: NVIDIA GB10 and Jetson, AMD APUs (Strix Halo, MI300A).

No vendor library is imported here; see :mod:`devmem_uma.platform` for what the figures mean.
"""

from typing import TYPE_CHECKING

from devmem.sdk import lazy_exports

if TYPE_CHECKING:  # the lazy names, for type checkers
    from devmem_uma.amd import AmdCard, ApuMemory, amd_cards
    from devmem_uma.platform import UmaPlatform
    from devmem_uma.plugin import detect_uma
    from devmem_uma.survey import Survey


__all__ = [
    "AmdCard",
    "ApuMemory",
    "Survey",
    "UmaPlatform",
    "amd_cards",
    "detect_uma",
]


#: Public names, imported from their modules on first use (PEP 562): the entry point loads this package's
#: ``plugin`` module, which must stay cheap. ``devmem_uma.survey`` is the module (its function is
#: ``devmem_uma.survey.survey``).
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "AmdCard": "devmem_uma.amd",
        "ApuMemory": "devmem_uma.amd",
        "amd_cards": "devmem_uma.amd",
        "UmaPlatform": "devmem_uma.platform",
        "detect_uma": "devmem_uma.plugin",
        "Survey": "devmem_uma.survey",
    },
)
