"""The web console's built files: ``static/`` holds what ``make ui`` bundles from ``ui/`` (the page, its
script and style, and the licences of the libraries the script includes).

The files are committed, so that ``make run`` and the image serve the console without Node; this package
only says where they are. :mod:`app.api.console` serves them under ``/ui/`` with the console's security
headers.
"""

from __future__ import annotations

from pathlib import Path

#: The directory of the built console (``index.html``, ``console.js``, ``console.css``, ``LICENSES.txt``).
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: The page every ``/ui/`` address that names no file serves.
INDEX_FILE = "index.html"
