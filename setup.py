"""Build the AES-NI/VAES extensions; everything else is declared in pyproject.toml.

aescore's C and Cython files sit with their job (``ctr/``, ``gcm/``, ``sealing/``, ``compat/``); the headers
of all three C folders are on every extension's include path, since the GCM and sealing cores build on the
CTR core's declarations.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

extra_compile_args = ["-O3", "-fno-strict-aliasing", "-pthread"]
extra_link_args = ["-pthread"]
if os.environ.get("KEYSTREAM_ASAN") == "1":
    extra_compile_args += ["-fsanitize=address", "-fno-omit-frame-pointer", "-O1", "-g"]
    extra_link_args += ["-fsanitize=address"]

C_FOLDERS = ["aescore/ctr", "aescore/gcm", "aescore/sealing"]

extensions = [
    # The aesni backend: AES-CTR (ctr/) and its fused AES-GCM (gcm/, bound in by gcm/_aesni_gcm.pxi).
    Extension(
        "aescore.ctr._aesni",
        sources=[
            "aescore/ctr/_aesni.pyx",
            "aescore/ctr/aesni_ctr.c",
            "aescore/gcm/aesni_gcm.c",
            "aescore/ctr/aesni_probe.c",
        ],
        include_dirs=C_FOLDERS,
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
    ),
    # The sealed format's batches: HKDF/HMAC-SHA256 (SHA-NI, AVX2 or scalar), AES-CTR and AES-GCM in C, many
    # messages a call; and HKDF-SHA256 alone into a caller's buffer (hkdf.c, for aescore.hkdf_sha256_into).
    Extension(
        "aescore.sealing._sealed",
        sources=[
            "aescore/sealing/_sealed.pyx",
            "aescore/sealing/sealed_batch.c",
            "aescore/sealing/sha256.c",
            "aescore/sealing/hkdf.c",
            "aescore/ctr/aesni_ctr.c",
            "aescore/gcm/aesni_gcm.c",
        ],
        include_dirs=C_FOLDERS,
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
    ),
    # The pyaes shim's C hot path (pure Python fallback when absent).
    Extension("aescore.compat._pyaes_fast", sources=["aescore/compat/_pyaes_fast.pyx"]),
]

setup(ext_modules=cythonize(extensions, language_level=3, compiler_directives={"binding": False}))
