"""Drop-in shims for code written against other AES libraries: ``from aescore.compat import pyaes``.

Nothing is imported here: a shim is loaded only by the code that asks for it.
"""
