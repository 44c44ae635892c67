"""Serving the app: the HTTP protocol with the service's limits (:class:`BoundedHttpToolsProtocol`), the
worker supervisor (:class:`Supervisor`), HTTPS (:class:`ServerTls`, :func:`check_plain_http_bind`) and the
served processes' malloc thresholds (:func:`fix_malloc_thresholds`)."""

from app.serving.limits import ConnectionLimits, raise_open_file_limit
from app.serving.malloc import fix_malloc_thresholds
from app.serving.protocol import BoundedHttpToolsProtocol, HeadersTooLargeError
from app.serving.tls import ServerTls, StartupRefusedError, check_plain_http_bind
from app.serving.workers import APP_FACTORY, Supervisor, listening_socket, reserve_address, reserve_port

__all__ = [
    "APP_FACTORY",
    "BoundedHttpToolsProtocol",
    "ConnectionLimits",
    "HeadersTooLargeError",
    "ServerTls",
    "StartupRefusedError",
    "Supervisor",
    "check_plain_http_bind",
    "fix_malloc_thresholds",
    "listening_socket",
    "raise_open_file_limit",
    "reserve_address",
    "reserve_port",
]
