"""Build the AES-NI/VAES extension; everything else is declared in pyproject.toml."""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

extra_compile_args = ["-O3", "-fno-strict-aliasing", "-pthread"]
extra_link_args = ["-pthread"]
if os.environ.get("KEYSTREAM_ASAN") == "1":
    extra_compile_args += ["-fsanitize=address", "-fno-omit-frame-pointer", "-O1", "-g"]
    extra_link_args += ["-fsanitize=address"]

extensions = [
    Extension(
        "aescore._aesni",
        sources=["aescore/_aesni.pyx", "aescore/aesni_ctr.c", "aescore/aesni_gcm.c", "aescore/aesni_probe.c"],
        include_dirs=["aescore"],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
    ),
    # The sealed format's batches: HKDF/HMAC-SHA256 (SHA-NI or scalar) and AES-CTR in C, many messages a call.
    Extension(
        "aescore._sealed",
        sources=["aescore/_sealed.pyx", "aescore/sealed_batch.c", "aescore/sha256.c", "aescore/aesni_ctr.c"],
        include_dirs=["aescore"],
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
    ),
    # pyaes_compat's C hot path (pure Python fallback when absent).
    Extension("aescore._pyaes_fast", sources=["aescore/_pyaes_fast.pyx"]),
]

setup(ext_modules=cythonize(extensions, language_level=3, compiler_directives={"binding": False}))
