"""``python -m loaderspec`` is the ``loaderspec`` command."""

import sys

from loaderspec.cli import main

sys.exit(main())
