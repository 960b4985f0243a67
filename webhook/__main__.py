"""``python -m webhook`` is the same as the ``gpu-admission`` console script."""

import sys

from webhook.cli import main

sys.exit(main())
