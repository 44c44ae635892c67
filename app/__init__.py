"""Keystream: the HTTP service. Start it with ``keystream serve`` or ``make run``; build it with
:func:`app.main.create_app`."""
