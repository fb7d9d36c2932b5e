"""devmem's unified-memory platform: NVIDIA GB10 and Jetson, AMD APUs (Strix Halo, MI300A).

No vendor library is imported here; see :mod:`devmem_uma.platform` for what the figures mean.
"""

from devmem_uma.amd import AmdCard, ApuMemory, amd_cards
from devmem_uma.platform import UmaPlatform
from devmem_uma.plugin import detect_uma
from devmem_uma.survey import Survey, survey

__all__ = ["AmdCard", "ApuMemory", "Survey", "UmaPlatform", "amd_cards", "detect_uma", "survey"]
