"""``python -m ella.cli`` works like the ``ella`` command."""

import sys

from ella.cli import main

sys.exit(main())
