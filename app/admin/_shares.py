"""Unseal shares typed or piped into a ``keystream-server`` command, for a keystore under the shamir seal.

``audit verify`` and ``operator migrate-seal`` need the shamir seal's master key, which exists only as
operator shares. They read them as the client's ``keystream operator unseal`` does: on a terminal, a prompt
per share without echo (an empty answer stops); otherwise one share a line from stdin (blank lines skipped).
Unlike the client, which asks again after a refused share, these commands stop at the first refusal: a
command run from a script should fail, not wait for a share that will not come.

Nothing here prints, logs or raises with a share's text: :class:`SharesRefusedError` says what was wrong.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.seal import Seal

__all__ = ["SharesRefusedError", "read_shares", "unseal_from_input"]


class SharesRefusedError(Exception):
    """The shares given do not unseal the seal: one is refused (the message says why), or too few came."""


def read_shares(prompt: Callable[[], str]) -> Iterator[str]:
    """Shares from a no-echo prompt (``prompt()``'s text) on a terminal until an empty answer, else one a line
    from stdin."""
    if sys.stdin.isatty():
        while share := getpass.getpass(prompt()).strip():
            yield share
        return
    for line in sys.stdin:
        if line.strip():
            yield line.strip()


def unseal_from_input(seal: Seal) -> None:
    """Unseal a shamir ``seal`` (opened sealed, with its keystore open) with the shares :func:`read_shares`
    gives; a seal that is not sealed needs none and reads nothing.

    Raises:
        SharesRefusedError: the seal is not a shamir seal but is sealed; a share is malformed, mistyped,
            foreign, a duplicate, or completes the threshold without rebuilding the keystore's master key;
            or the input ended before the threshold.
    """
    from app.seal.shamir import ShamirSeal
    from app.seal.shares import InvalidShareError

    if not seal.sealed:
        return
    if not isinstance(seal, ShamirSeal):
        raise SharesRefusedError(f"{seal.describe()} is sealed")
    threshold = seal.status().threshold
    shares = read_shares(lambda: f"unseal share ({seal.status().progress + 1} of {threshold}): ")
    for number, share in enumerate(shares, start=1):
        try:
            seal.submit_share(share)
        except InvalidShareError as exc:
            raise SharesRefusedError(f"KEYSTREAM_SEAL=shamir: share {number} refused: {exc}") from None
        if not seal.sealed:
            return
    status = seal.status()
    raise SharesRefusedError(
        f"KEYSTREAM_SEAL=shamir: give {status.threshold} shares on stdin, one a line ({status.progress} read)"
    )
