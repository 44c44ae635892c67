"""The access log line of a request with its route template where uvicorn wrote the path and query string.

uvicorn's access log wrote ``GET /v1/keys/payroll/encrypt?token=ks_...&iv=... HTTP/1.1`` as the client sent
it: a token passed as a query parameter, an IV, the key name, all in the server's log. The protocol gives
each request's cycle a :class:`RouteAccessLog` in place of uvicorn's access logger, and the line names the
route (``/v1/keys/{name}/encrypt``, :func:`app.api.access_log.route_template`) instead.
"""

from __future__ import annotations

import logging
from typing import Any

from app.api.access_log import route_template

#: uvicorn's access line: client, method, path with query string, HTTP version, status.
_FIELDS = 5


class RouteAccessLog:
    """uvicorn's access logger for one request (it calls only ``info``), with the route template in place
    of the path and query string."""

    def __init__(self, logger: logging.Logger, scope: Any) -> None:
        self._logger = logger
        self._scope = scope

    def info(self, message: str, *args: Any) -> None:
        """Log uvicorn's line ``%s - "%s %s HTTP/%s" %d`` with the route template as its path."""
        if len(args) == _FIELDS:
            client, method, _path, version, status = args
            args = (client, method, route_template(self._scope), version, status)
        else:  # a line this class does not know: never risk a raw path
            message, args = "%s", ("access log line withheld (unknown format)",)
        self._logger.info(message, *args)
