"""A logging filter that turns uvicorn's traceback for an aborted response stream into one WARNING line.

A sealed decrypt whose later segment fails to verify must abort the connection (so no client mistakes a
truncated body for success); the route does that by raising :class:`~app.api.streaming.StreamAbortedError`
after the response started, which uvicorn logs as ``Exception in ASGI application`` with a full traceback at
ERROR. Any ``decrypt`` token could flood the logs that way, so the record is rewritten to a single WARNING
line holding the error's message (what failed and where, e.g. the segment index: never key material or
plaintext). Every other record passes unchanged.
"""

from __future__ import annotations

import logging

from app.api.streaming import StreamAbortedError

#: The logger uvicorn's HTTP protocols report application exceptions on.
UVICORN_ERROR_LOGGER = "uvicorn.error"


class StreamAbortFilter(logging.Filter):
    """Rewrite records carrying a :class:`StreamAbortedError` to one WARNING line without traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, StreamAbortedError):
            record.levelno = logging.WARNING
            record.levelname = logging.getLevelName(logging.WARNING)
            record.msg = "aborted a response stream after it started: %s"
            record.args = (str(exc),)
            record.exc_info = None
            record.exc_text = None
        return True


def install_stream_abort_filter(logger_name: str = UVICORN_ERROR_LOGGER) -> None:
    """Add :class:`StreamAbortFilter` to ``logger_name`` once (idempotent; logging config keeps filters)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(existing, StreamAbortFilter) for existing in logger.filters):
        logger.addFilter(StreamAbortFilter())
