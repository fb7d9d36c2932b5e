"""devmem backend for the ACME reference accelerator, shipped as its own wheel (``devmem-acme``).

An example of a vendor backend: the platform lives in :mod:`devmem_acme.platform`, the registration
in :mod:`devmem_acme.plugin` (entry point ``acme`` of the ``devmem`` group).
"""

__version__ = "0.3.1"
