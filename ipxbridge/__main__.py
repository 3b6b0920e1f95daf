"""``python -m ipxbridge`` is the same as the ``ipxbridge`` console script."""

import sys

from ipxbridge.cli import main

sys.exit(main())
