"""/metrics: the families of the issue's section 9, bounded labels, promtool acceptance."""

from __future__ import annotations

import shutil
import subprocess
import time

from tests.app.api.conftest import Api

PROMTOOL = shutil.which("promtool") or (
    "/usr/bin/promtool" if shutil.os.path.exists("/usr/bin/promtool") else None
)  # type: ignore[attr-defined]


async def _exercise(api: Api) -> str:
    await api.create_key("secret-key-name", segment_size=4096)
    encrypted = await api.encrypt("secret-key-name", b"x" * 10_000)
    await api.decrypt("secret-key-name", encrypted.content)
    await api.encrypt("secret-key-name", b"y" * 100, format="raw")
    await api.client.post(
        "/v1/keys/secret-key-name/encrypt/batch", json={"items": [{"plaintext": "aGk="}]}, headers=api.auth()
    )
    await api.client.get("/nope")
    response = await api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


async def test_required_families_are_present(api: Api) -> None:
    text = await _exercise(api)
    backend = api.app.state.keystream.backends.default
    for needle in (
        f'keystream_crypto_seconds_bucket{{backend="{backend}",format="sealed",le="0.01",operation="encrypt"}}',
        f'keystream_crypto_seconds_count{{backend="{backend}",format="sealed",operation="decrypt"}}',
        f'keystream_crypto_seconds_count{{backend="{backend}",format="raw",operation="encrypt"}}',
        f'keystream_crypto_bytes_total{{backend="{backend}",operation="encrypt"}}',
        'keystream_http_request_duration_seconds_count{method="POST",route="/v1/keys/{name}/encrypt",status="200"}',
        'keystream_http_request_duration_seconds_count{method="GET",route="unmatched",status="404"}',
        'keystream_key_cache_requests_total{result="hit"}',
        'keystream_key_cache_requests_total{result="miss"}',
        "keystream_key_cache_evictions_total",
        "keystream_key_cache_entries",
        "keystream_secret_memory_unlocked_bytes",
        "keystream_inflight_requests",
        "keystream_key_auto_rotations_total",
    ):
        assert needle in text, needle


async def test_labels_never_carry_key_names_or_raw_paths(api: Api) -> None:
    text = await _exercise(api)
    assert "secret-key-name" not in text
    assert 'route="/nope"' not in text


async def test_crypto_bytes_count_the_payload(api: Api) -> None:
    await api.create_key("k")
    backend = api.app.state.keystream.backends.default
    needle = f'keystream_crypto_bytes_total{{backend="{backend}",operation="encrypt"}} '

    def value(text: str) -> float:
        line = next((line for line in text.splitlines() if line.startswith(needle)), needle + "0")
        return float(line.split()[-1])

    before = value((await api.client.get("/metrics")).text)
    await api.encrypt("k", bytes(12_345), format="raw")
    after = value((await api.client.get("/metrics")).text)
    assert after - before == 12_345


async def test_promtool_accepts_the_exposition(api: Api) -> None:
    assert PROMTOOL is not None, "promtool is missing (Debian package prometheus): make tools"
    text = await _exercise(api)
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def _sample(text: str, name: str) -> float:
    """The value of the one sample named exactly ``name`` (labels included) in an exposition."""
    (value,) = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(f"{name} ")]
    return float(value)


async def test_batch_buffer_use_and_change_log_reads_move(api: Api) -> None:
    state = api.app.state.keystream
    text = (await api.client.get("/metrics")).text
    assert _sample(text, "keystream_batch_buffer_limit_bytes") == state.settings.batch_buffer_budget_bytes
    assert _sample(text, "keystream_batch_buffer_bytes") == 0
    first_read = _sample(text, 'keystream_change_log_read_timestamp_seconds{worker="0"}')
    held = await state.batch_budget.reserve(5000)
    time.sleep(0.01)
    state.follower.poll()
    text = (await api.client.get("/metrics")).text
    assert _sample(text, "keystream_batch_buffer_bytes") == 5000
    last_read = _sample(text, 'keystream_change_log_read_timestamp_seconds{worker="0"}')
    assert first_read < last_read <= time.time()
    await state.batch_budget.release(held)
    assert _sample((await api.client.get("/metrics")).text, "keystream_batch_buffer_bytes") == 0
