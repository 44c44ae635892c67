"""Serving the app: the HTTP protocol with the service's limits (:class:`BoundedHttpToolsProtocol`) and the
worker supervisor (:class:`Supervisor`)."""

from app.serving.limits import ConnectionLimits, raise_open_file_limit
from app.serving.protocol import BoundedHttpToolsProtocol, HeadersTooLargeError
from app.serving.workers import Supervisor, reserve_port

__all__ = [
    "BoundedHttpToolsProtocol",
    "ConnectionLimits",
    "HeadersTooLargeError",
    "Supervisor",
    "raise_open_file_limit",
    "reserve_port",
]
