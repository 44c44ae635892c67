"""The same Transit requests to OpenBao and to Keystream, and every difference in what they answer.

    python -m bench.transit_diff --openbao /path/to/bao

Starts OpenBao's dev server (in memory, Transit mounted at ``transit/``,
:func:`bench.bench_peer.start_openbao`) and a two-worker Keystream on free ports of 127.0.0.1, sends each
step of :data:`STEPS` to both (each with its root token as ``X-Vault-Token``), and prints, per step, whether
the status, the error shape (``{"errors": [...]}`` or not), the fields of ``data`` and the values the step
names agree. It ends with the interoperability check: a ciphertext OpenBao made under an exportable key
decrypts in Keystream once the exported material is imported. Not part of ``make test`` (it needs an
OpenBao binary, built as docs/benchmarks.md says); docs/transit-compat.md lists the differences it found
and why they remain. Exits 0 however many differences it prints: it is a report, not a check.
"""

from __future__ import annotations

import argparse
import base64
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.bench_peer import start_openbao
from bench.service_process import ROOT_TOKEN, start_server, stop_server

#: What a step's body may depend on: the answers this target gave to earlier steps, by step label.
Saved = dict[str, dict[str, Any]]
Body = dict[str, Any] | Callable[[Saved], dict[str, Any]] | None


@dataclass(frozen=True)
class Step:
    """One request: its label, method, path under ``/v1/transit/``, body, the ``data`` values to compare."""

    label: str
    method: str
    path: str
    body: Body = None
    values: tuple[str, ...] = ()
    token: str | None = "root"  # "root", "none" (no header) or a literal token


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _data(saved: Saved, label: str) -> dict[str, Any]:
    data = saved.get(label, {}).get("data") or {}
    return dict(data)


def _ciphertext(label: str) -> Callable[[Saved], dict[str, Any]]:
    return lambda saved: {"ciphertext": _data(saved, label).get("ciphertext", "")}


STEPS: tuple[Step, ...] = (
    Step("create", "POST", "keys/diff", {}),
    Step("create again", "POST", "keys/diff", {}),
    Step("create aes128", "POST", "keys/diff128", {"type": "aes128-gcm96"}),
    Step("create chacha", "POST", "keys/diffcha", {"type": "chacha20-poly1305"}),
    Step("create derived", "POST", "keys/diffder", {"derived": True}),
    Step(
        "read", "GET", "keys/diff", None, ("type", "latest_version", "min_decryption_version", "exportable")
    ),
    Step("read unknown", "GET", "keys/nope"),
    Step("list (GET ?list=true)", "GET", "keys?list=true"),
    Step("list (LIST)", "LIST", "keys"),
    Step("GET keys without list", "GET", "keys"),
    Step("encrypt", "POST", "encrypt/diff", {"plaintext": b64(b"hello")}, ("key_version",)),
    Step("decrypt", "POST", "decrypt/diff", _ciphertext("encrypt"), ("plaintext",)),
    Step("encrypt with ad", "POST", "encrypt/diff", {"plaintext": b64(b"x"), "associated_data": b64(b"a")}),
    Step(
        "decrypt wrong ad",
        "POST",
        "decrypt/diff",
        lambda saved: {**_ciphertext("encrypt with ad")(saved), "associated_data": b64(b"b")},
    ),
    Step("decrypt too short", "POST", "decrypt/diff", {"ciphertext": "vault:v1:AAAA"}),
    Step("decrypt no prefix", "POST", "decrypt/diff", {"ciphertext": "abc"}),
    Step("decrypt bad base64", "POST", "decrypt/diff", {"ciphertext": "vault:v1:!!!"}),
    Step("decrypt unknown version", "POST", "decrypt/diff", {"ciphertext": "vault:v9:" + b64(bytes(40))}),
    Step("encrypt bad base64", "POST", "encrypt/diff", {"plaintext": "not base64!"}),
    Step("encrypt missing plaintext", "POST", "encrypt/diff", {}),
    Step("encrypt unknown key", "POST", "encrypt/auto-created", {"plaintext": b64(b"x")}),
    Step("decrypt unknown key", "POST", "decrypt/nope", {"ciphertext": "vault:v1:" + b64(bytes(40))}),
    Step("rotate", "POST", "keys/diff/rotate", {}),
    Step("encrypt key_version 1", "POST", "encrypt/diff", {"plaintext": b64(b"v1"), "key_version": 1}),
    Step("encrypt key_version 9", "POST", "encrypt/diff", {"plaintext": b64(b"v1"), "key_version": 9}),
    Step("rewrap", "POST", "rewrap/diff", _ciphertext("encrypt key_version 1"), ("key_version",)),
    Step("config min_decryption_version 2", "POST", "keys/diff/config", {"min_decryption_version": 2}),
    Step("decrypt below min", "POST", "decrypt/diff", _ciphertext("encrypt key_version 1")),
    Step("config min_decryption_version 9", "POST", "keys/diff/config", {"min_decryption_version": 9}),
    Step(
        "batch encrypt, one bad",
        "POST",
        "encrypt/diff",
        {
            "batch_input": [
                {"plaintext": b64(b"a"), "reference": "r1"},
                {"plaintext": "!!", "reference": "r2"},
            ]
        },
    ),
    Step(
        "batch decrypt, all bad",
        "POST",
        "decrypt/diff",
        {"batch_input": [{"ciphertext": "x"}, {"ciphertext": "y"}]},
    ),
    Step("datakey plaintext", "POST", "datakey/plaintext/diff", {"bits": 512}, ("key_version",)),
    Step("datakey wrapped", "POST", "datakey/wrapped/diff", {}),
    Step("datakey bits 100", "POST", "datakey/plaintext/diff", {"bits": 100}),
    Step("datakey other kind", "POST", "datakey/other/diff", {}),
    Step("hmac", "POST", "hmac/diff", {"input": b64(b"m")}),
    Step("hmac sha2-512 in path", "POST", "hmac/diff/sha2-512", {"input": b64(b"m")}),
    Step("hmac sha2-224", "POST", "hmac/diff/sha2-224", {"input": b64(b"m")}),
    Step(
        "verify own hmac",
        "POST",
        "verify/diff",
        lambda saved: {"input": b64(b"m"), "hmac": _data(saved, "hmac").get("hmac", "")},
        ("valid",),
    ),
    Step("verify malformed hmac", "POST", "verify/diff", {"input": b64(b"m"), "hmac": "vault:v1:!!"}),
    Step("random", "POST", "random", {}),
    Step("random/16 hex", "POST", "random/16", {"format": "hex"}),
    Step("random 0 bytes", "POST", "random/0", {}),
    Step("hash", "POST", "hash", {"input": b64(b"abc")}, ("sum",)),
    Step(
        "hash sha3-256 base64", "POST", "hash/sha3-256", {"input": b64(b"abc"), "format": "base64"}, ("sum",)
    ),
    Step("hash md5", "POST", "hash/md5", {"input": b64(b"abc")}),
    Step("delete, not allowed", "DELETE", "keys/diff"),
    Step("config deletion_allowed", "POST", "keys/diff/config", {"deletion_allowed": True}),
    Step("delete", "DELETE", "keys/diff"),
    Step("read deleted", "GET", "keys/diff"),
    # Derived and convergent keys, export, backup and restore, the wrapping key.
    Step(
        "derived encrypt with context",
        "POST",
        "encrypt/diffder",
        {"plaintext": b64(b"d"), "context": b64(b"t1")},
    ),
    Step("derived encrypt without context", "POST", "encrypt/diffder", {"plaintext": b64(b"d")}),
    Step(
        "derived decrypt with context",
        "POST",
        "decrypt/diffder",
        lambda saved: {**_ciphertext("derived encrypt with context")(saved), "context": b64(b"t1")},
        ("plaintext",),
    ),
    Step(
        "derived decrypt, other context",
        "POST",
        "decrypt/diffder",
        lambda saved: {**_ciphertext("derived encrypt with context")(saved), "context": b64(b"t2")},
    ),
    Step("create convergent", "POST", "keys/diffconv", {"derived": True, "convergent_encryption": True}),
    Step("convergent encrypt", "POST", "encrypt/diffconv", {"plaintext": b64(b"same"), "context": b64(b"c")}),
    Step("convergent without derived", "POST", "keys/diffconv2", {"convergent_encryption": True}),
    Step("export, not exportable", "GET", "export/encryption-key/diff128"),
    Step("create exportable", "POST", "keys/diffexp", {"exportable": True, "allow_plaintext_backup": True}),
    Step("export", "GET", "export/encryption-key/diffexp"),
    Step("export version 1", "GET", "export/encryption-key/diffexp/1"),
    Step("export unknown kind", "GET", "export/other-key/diffexp"),
    Step("backup, not allowed", "GET", "backup/diff128"),
    Step("backup", "GET", "backup/diffexp"),
    Step(
        "restore under a new name",
        "POST",
        "restore/diffrestored",
        lambda saved: {"backup": _data(saved, "backup").get("backup", "")},
    ),
    Step("restore garbage", "POST", "restore/diffgarbage", {"backup": b64(b"not a backup")}),
    Step("wrapping key", "GET", "wrapping_key"),
    Step("no token", "POST", "encrypt/diff128", {"plaintext": b64(b"x")}, token="none"),
    Step("wrong token", "POST", "encrypt/diff128", {"plaintext": b64(b"x")}, token="ks_0_wrong"),
    Step("unknown path", "POST", "nowhere/diff128", {}),
)


@dataclass
class Answer:
    status: int
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def error_shape(self) -> str:
        if "errors" in self.body:
            return "errors"
        return "error" if "error" in self.body else "-"


def send(client: httpx.Client, token: str, step: Step, saved: Saved) -> Answer:
    """One step against one target (``token`` is its root token)."""
    body = step.body(saved) if callable(step.body) else step.body
    headers: dict[str, str] = {}
    if step.token != "none":
        headers["X-Vault-Token"] = token if step.token == "root" else str(step.token)
    response = client.request(
        step.method,
        f"/v1/transit/{step.path}",
        content=None if body is None else json.dumps(body),
        headers=headers,
    )
    try:
        parsed = response.json() if response.content else {}
    except ValueError:
        parsed = {"text": response.text[:200]}
    answer = Answer(response.status_code, parsed if isinstance(parsed, dict) else {"json": parsed})
    saved[step.label] = answer.body
    return answer


def differences(step: Step, bao: Answer, ours: Answer) -> list[str]:
    """What differs between OpenBao's answer and Keystream's to ``step``."""
    found: list[str] = []
    if bao.status != ours.status:
        found.append(f"status {bao.status} vs {ours.status}")
    if bao.error_shape != ours.error_shape:
        found.append(f"error shape {bao.error_shape} vs {ours.error_shape}")
    bao_data = bao.body.get("data") or {}
    our_data = ours.body.get("data") or {}
    if isinstance(bao_data, dict) and isinstance(our_data, dict):
        only_bao = sorted(set(bao_data) - set(our_data))
        only_ours = sorted(set(our_data) - set(bao_data))
        if only_bao:
            found.append(f"data fields only OpenBao sends: {', '.join(only_bao)}")
        if only_ours:
            found.append(f"data fields only Keystream sends: {', '.join(only_ours)}")
        for name in step.values:
            if bao_data.get(name) != our_data.get(name):
                found.append(f"{name}: {bao_data.get(name)!r} vs {our_data.get(name)!r}")
    return found


def interop(bao: httpx.Client, bao_token: str, ours: httpx.Client) -> str:
    """An OpenBao ciphertext, its key exported and imported into Keystream, decrypted by Keystream."""
    vault = {"X-Vault-Token": bao_token}
    bao.post("/v1/transit/keys/moved", json={"exportable": True}, headers=vault).raise_for_status()
    made = bao.post("/v1/transit/encrypt/moved", json={"plaintext": b64(b"from openbao")}, headers=vault)
    made.raise_for_status()
    exported = bao.get("/v1/transit/export/encryption-key/moved/1", headers=vault)
    exported.raise_for_status()
    material = exported.json()["data"]["keys"]["1"]
    imported = ours.post("/v1/keys/moved/import", json={"key": material})
    imported.raise_for_status()
    opened = ours.post(
        "/v1/transit/decrypt/moved",
        json={"ciphertext": made.json()["data"]["ciphertext"]},
        headers={"X-Vault-Token": ROOT_TOKEN},
    )
    if opened.status_code != 200:
        return f"FAILED: Keystream answered {opened.status_code} {opened.text[:200]}"
    plaintext = base64.b64decode(opened.json()["data"]["plaintext"])
    return "ok" if plaintext == b"from openbao" else f"FAILED: wrong plaintext {plaintext!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--openbao", type=Path, required=True, help="the bao binary")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="transit-diff-") as scratch:
        work = Path(scratch)
        bao_process, bao_target = start_openbao(arguments.openbao, work)
        (work / "keystream").mkdir()
        server = start_server(
            work / "keystream",
            work / "keystream.log",
            KEYSTREAM_WORKERS="2",
            KEYSTREAM_ALLOW_KEY_IMPORT="true",
        )
        try:
            with (
                httpx.Client(base_url=bao_target.url, timeout=30) as bao,
                httpx.Client(base_url=server.url, headers=server.auth, timeout=30) as ours,
            ):
                report(bao, bao_target.auth_value, ours)
        finally:
            stop_server(server)
            bao_process.terminate()
            bao_process.wait(timeout=15)


def report(bao: httpx.Client, bao_token: str, ours: httpx.Client) -> None:
    """Run :data:`STEPS` against both and print the differences, then the interoperability check."""
    bao_saved: Saved = {}
    our_saved: Saved = {}
    plain = httpx.Client(base_url=str(ours.base_url), timeout=30)  # no Authorization: X-Vault-Token only
    differing = 0
    with plain:
        for step in STEPS:
            bao_answer = send(bao, bao_token, step, bao_saved)
            our_answer = send(plain, ROOT_TOKEN, step, our_saved)
            found = differences(step, bao_answer, our_answer)
            differing += bool(found)
            mark = "DIFF" if found else "same"
            statuses = f"{bao_answer.status} / {our_answer.status}"
            print(f"{mark}  {step.method} {step.path}  ({step.label}): {statuses}")
            for line in found:
                print(f"        {line}")
    print(f"\n{differing} of {len(STEPS)} steps differ (OpenBao first, Keystream second)")
    print(
        f"interoperability: OpenBao ciphertext, key exported and imported, decrypted by Keystream: "
        f"{interop(bao, bao_token, ours)}"
    )


if __name__ == "__main__":
    main()
