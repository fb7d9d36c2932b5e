"""``python -m devmem``: the same as the ``devmem`` command."""

import sys

try:
    from devmem.command.main import main
except KeyboardInterrupt:  # Ctrl-C while the command is still being imported
    sys.exit(130)

sys.exit(main())
