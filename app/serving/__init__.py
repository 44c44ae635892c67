"""Serving the app: the HTTP protocol with the service's limits (:class:`BoundedHttpToolsProtocol`)."""

from app.serving.protocol import BoundedHttpToolsProtocol, HeadersTooLargeError

__all__ = ["BoundedHttpToolsProtocol", "HeadersTooLargeError"]
