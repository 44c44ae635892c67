"""A throwaway SoftHSM2 token for the tests: its own token directory, config file and user PIN.

SoftHSM2 (Debian's ``softhsm2``, which ``scripts/install-tools.sh`` installs) is a real PKCS#11 module: the
pkcs11 seal talks to it exactly as to a hardware token. :func:`make_token` writes a config whose
``directories.tokendir`` is a fresh directory and runs ``softhsm2-util --init-token``; the environment
variable ``SOFTHSM2_CONF`` points the module at it (set it in the test process with ``monkeypatch`` and pass
it to any server started). SoftHSM2 reads its config and token directory when the module is initialised, once
per process: a test that uses the module in its own process after changing ``SOFTHSM2_CONF`` or adding a
token calls :func:`reload_module`. When SoftHSM2 is missing or the token cannot be made, :class:`SoftHsmError`
says why and the test fails, never skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

LIBRARY = Path("/usr/lib/softhsm/libsofthsm2.so")
#: Distinctive, so that a test can show it appears in no output or log.
USER_PIN = "pin-7c41e9"
SO_PIN = "5678"


class SoftHsmError(RuntimeError):
    """SoftHSM2 is missing or a token could not be initialised."""


@dataclass(frozen=True)
class SoftHsmToken:
    """An initialised token: where its config is, its label and PINs, and the settings that select it."""

    conf: Path
    label: str
    pin: str = USER_PIN
    library: Path = LIBRARY

    def environment(self, key_label: str = "keystream-master") -> dict[str, str]:
        """The ``KEYSTREAM_*`` variables (and ``SOFTHSM2_CONF``) of a server sealed by this token."""
        return {
            "SOFTHSM2_CONF": str(self.conf),
            "KEYSTREAM_SEAL": "pkcs11",
            "KEYSTREAM_PKCS11_LIB": str(self.library),
            "KEYSTREAM_PKCS11_TOKEN_LABEL": self.label,
            "KEYSTREAM_PKCS11_PIN": self.pin,
            "KEYSTREAM_PKCS11_KEY_LABEL": key_label,
        }


def make_token(directory: Path, label: str = "keystream") -> SoftHsmToken:
    """Initialise a token labelled ``label`` in ``directory`` (created 0700; a second call adds a token).

    Raises:
        SoftHsmError: ``softhsm2-util`` or the module is missing (run scripts/install-tools.sh), or the
            initialisation fails.
    """
    util = shutil.which("softhsm2-util")
    if util is None or not LIBRARY.exists():
        raise SoftHsmError(
            "SoftHSM2 is not installed (softhsm2-util, libsofthsm2.so): run scripts/install-tools.sh"
        )
    tokens = directory / "tokens"
    tokens.mkdir(mode=0o700, parents=True, exist_ok=True)
    conf = directory / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n")
    result = subprocess.run(
        [util, "--init-token", "--free", "--label", label, "--pin", USER_PIN, "--so-pin", SO_PIN],
        env={**os.environ, "SOFTHSM2_CONF": str(conf)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise SoftHsmError(
            f"softhsm2-util --init-token failed: {result.stderr.strip() or result.stdout.strip()}"
        )
    return SoftHsmToken(conf=conf, label=label)


def reload_module() -> None:
    """Finalize and initialise SoftHSM2 in this process, so it reads ``SOFTHSM2_CONF`` and its tokens anew.

    Every session opened before is gone afterwards.
    """
    import pkcs11

    pkcs11.lib(str(LIBRARY)).reinitialize()
