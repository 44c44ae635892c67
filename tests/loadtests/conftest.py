"""Importing locust monkey-patches the whole process with gevent unless told not to: keep the test process
(which also runs asyncio and threaded suites) unpatched. Locust processes started by loadtests.run drop the
variable again (loadtests/run.py), since a real load run needs the patching."""

from __future__ import annotations

import os

os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
