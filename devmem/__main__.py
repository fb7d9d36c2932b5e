"""``python -m devmem``: the same as the ``devmem`` command."""

import sys

from devmem.cli import main

sys.exit(main())
