"""``python -m keystream_client.cli``: the ``keystream`` command without the console script."""

import sys

from keystream_client.cli import main

sys.exit(main())
