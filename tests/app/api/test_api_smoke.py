from __future__ import annotations

from tests.app.api.conftest import Api


async def test_round_trip(api: Api) -> None:
    await api.create_key("k1")
    enc = await api.encrypt("k1", b"hello world")
    assert enc.status_code == 200, enc.text
    dec = await api.decrypt("k1", enc.content)
    assert dec.status_code == 200, dec.text
    assert dec.content == b"hello world"
