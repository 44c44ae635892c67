"""Security review L2: the client's hidden ``.partial`` output file is private and unpredictable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from keystream_client import KeystreamClient, _streams
from keystream_client._streams import open_partial


def test_planted_symlink_at_the_old_predictable_name_is_not_followed(
    client: KeystreamClient, key_name: str, tmp_path: Path
) -> None:
    client.create_key(key_name)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"untouched")
    (tmp_path / f".out.bin.{os.getpid()}.partial").symlink_to(victim)
    sealed = client.encrypt(key_name, b"plaintext for the file").data
    client.decrypt_file(key_name, sealed, tmp_path / "out.bin")
    assert victim.read_bytes() == b"untouched"
    assert (tmp_path / "out.bin").read_bytes() == b"plaintext for the file"
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o600


def test_open_partial_is_exclusive_private_and_random(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_umask = os.umask(0)
    try:
        first, first_file = open_partial(tmp_path / "out.bin")
        second, second_file = open_partial(tmp_path / "out.bin")
    finally:
        os.umask(old_umask)
    first_file.close()
    second_file.close()
    assert first != second and first.parent == tmp_path
    assert first.name.startswith(".out.bin.") and first.name.endswith(".partial")
    assert stat.S_IMODE(first.stat().st_mode) == 0o600  # private from creation, whatever the umask

    # A name that already exists (here a planted symlink) is skipped, never opened.
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"untouched")
    (tmp_path / ".out.bin.planted.partial").symlink_to(victim)
    names = iter(["planted", "fresh"])
    monkeypatch.setattr(_streams.secrets, "token_hex", lambda _: next(names))
    path, out = open_partial(tmp_path / "out.bin")
    with out:
        out.write(b"secret")
    assert path.name == ".out.bin.fresh.partial" and path.read_bytes() == b"secret"
    assert victim.read_bytes() == b"untouched"
