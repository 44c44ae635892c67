"""Security review L4: an aborted stream is one WARNING line, other records pass untouched."""

from __future__ import annotations

import logging
import sys

from app.api.logfilter import StreamAbortFilter, install_stream_abort_filter
from app.api.streaming import StreamAbortedError


def _record(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except BaseException:
        info = sys.exc_info()
    return logging.LogRecord(
        "uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application\n", (), info
    )


def test_stream_abort_becomes_one_warning_line() -> None:
    record = _record(StreamAbortedError("decryption_failed: segment 7 failed authentication"))
    assert StreamAbortFilter().filter(record)
    assert record.levelno == logging.WARNING and record.levelname == "WARNING"
    assert record.exc_info is None
    text = logging.Formatter().format(record)
    assert "\n" not in text and "segment 7" in text and "Traceback" not in text


def test_other_errors_keep_their_traceback() -> None:
    record = _record(RuntimeError("boom"))
    assert StreamAbortFilter().filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert "Traceback" in logging.Formatter().format(record)


def test_install_is_idempotent() -> None:
    logger = logging.getLogger("keystream.test.logfilter")
    install_stream_abort_filter(logger.name)
    install_stream_abort_filter(logger.name)
    assert sum(isinstance(f, StreamAbortFilter) for f in logger.filters) == 1
