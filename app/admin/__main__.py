"""``python -m app.admin``: the ``keystream-server`` command without the console script."""

import sys

from app.admin import main

sys.exit(main())
