"""``python -m steerable.cli``: the ``steerable`` command without its installed script."""

import sys

from steerable.cli import main

sys.exit(main())
