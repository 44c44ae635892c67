"""The bottom layer of the service: settings, metric definitions and their exposition.

Nothing here imports another part of ``app`` or a web framework.
"""
