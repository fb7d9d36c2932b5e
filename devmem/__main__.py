"""``python -m devmem``: the same as the ``devmem`` command."""

import sys

from devmem.command.main import main

sys.exit(main())
