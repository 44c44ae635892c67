"""Keystream: the HTTP service. Start it with ``keystream-server serve`` (:mod:`app.admin`) or ``make run``;
build it with :func:`app.main.create_app`."""
