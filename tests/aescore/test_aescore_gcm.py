"""aescore.AesGcm on every backend and aesni path: published known answers, the API contract, bad inputs.

Known answers: the GCM specification's test cases 1-18 (McGrew and Viega, "The Galois/Counter Mode of
Operation", appendix B), two longer 96-bit-IV cases from GNU Nettle's gcm-test.c, and
``vectors/gcm_cavp.rsp`` (NIST CAVP excerpts plus clearly labelled cross-checked entries; see its header).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import aescore
from aescore.gcm._ghash import PythonGhash

VECTORS = Path(__file__).parent / "vectors" / "gcm_cavp.rsp"
K1 = "feffe9928665731c6d6a8f9467308308"
P64 = (
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
)
P60, A20 = P64[:120], "feedfacedeadbeeffeedfacedeadbeefabaddad2"
IV12, IV8 = "cafebabefacedbaddecaf888", "cafebabefacedbad"
IV60 = (
    "9313225df88406e555909c5aff5269aa6a7a9538534f7da1e4c303d2a318a728"
    "c3c0c95156809539fcf0e2429a6b525416aedbf5a0de6a57a637b39b"
)
# (test case, key, IV, plaintext, AAD, ciphertext, tag), typed from the specification's appendix B.
SPEC_CASES = [
    (1, "00" * 16, "00" * 12, "", "", "", "58e2fccefa7e3061367f1d57a4e7455a"),
    (2, "00" * 16, "00" * 12, "00" * 16, "", "0388dace60b6a392f328c2b971b2fe78",
     "ab6e47d42cec13bdf53a67b21257bddf"),
    (3, K1, IV12, P64, "", "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
     "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985", "4d5c2af327cd64a62cf35abd2ba6fab4"),
    (4, K1, IV12, P60, A20, "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
     "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091", "5bc94fbc3221a5db94fae95ae7121a47"),
    (5, K1, IV8, P60, A20, "61353b4c2806934a777ff51fa22a4755699b2a714fcdc6f83766e5f97b6c7423"
     "73806900e49f24b22b097544d4896b424989b5e1ebac0f07c23f4598", "3612d2e79e3b0785561be14aaca2fccb"),
    (6, K1, IV60, P60, A20, "8ce24998625615b603a033aca13fb894be9112a5c3a211a8ba262a3cca7e2ca7"
     "01e4a9a4fba43c90ccdcb281d48c7c6fd62875d2aca417034c34aee5", "619cc5aefffe0bfa462af43c1699d050"),
    (7, "00" * 24, "00" * 12, "", "", "", "cd33b28ac773f74ba00ed1f312572435"),
    (8, "00" * 24, "00" * 12, "00" * 16, "", "98e7247c07f0fe411c267e4384b0f600",
     "2ff58d80033927ab8ef4d4587514f0fb"),
    (9, K1 + K1[:16], IV12, P64, "", "3980ca0b3c00e841eb06fac4872a2757859e1ceaa6efd984628593b40ca1e19c"
     "7d773d00c144c525ac619d18c84a3f4718e2448b2fe324d9ccda2710acade256", "9924a7c8587336bfb118024db8674a14"),
    (10, K1 + K1[:16], IV12, P60, A20, "3980ca0b3c00e841eb06fac4872a2757859e1ceaa6efd984628593b40ca1e19c"
     "7d773d00c144c525ac619d18c84a3f4718e2448b2fe324d9ccda2710", "2519498e80f1478f37ba55bd6d27618c"),
    (11, K1 + K1[:16], IV8, P60, A20, "0f10f599ae14a154ed24b36e25324db8c566632ef2bbb34f8347280fc4507057"
     "fddc29df9a471f75c66541d4d4dad1c9e93a19a58e8b473fa0f062f7", "65dcc57fcf623a24094fcca40d3533f8"),
    (12, K1 + K1[:16], IV60, P60, A20, "d27e88681ce3243c4830165a8fdcf9ff1de9a1d8e6b447ef6ef7b79828666e45"
     "81e79012af34ddd9e2f037589b292db3e67c036745fa22e7e9b7373b", "dcf566ff291c25bbb8568fc3d376a6d9"),
    (13, "00" * 32, "00" * 12, "", "", "", "530f8afbc74536b9a963b4f1c4cb738b"),
    (14, "00" * 32, "00" * 12, "00" * 16, "", "cea7403d4d606b6e074ec5d3baf39d18",
     "d0d1c8a799996bf0265b98b5d48ab919"),
    (15, K1 * 2, IV12, P64, "", "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
     "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad", "b094dac5d93471bdec1a502270e3cc6c"),
    (16, K1 * 2, IV12, P60, A20, "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
     "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662", "76fc6ece0f4e1768cddf8853bb2d551b"),
    (17, K1 * 2, IV8, P60, A20, "c3762df1ca787d32ae47c13bf19844cbaf1ae14d0b976afac52ff7d79bba9de0"
     "feb582d33934a4f0954cc2363bc73f7862ac430e64abe499f47c9b1f", "3a337dbf46a792c45e454913fe2ea8f2"),
    (18, K1 * 2, IV60, P60, A20, "5a8def2f0c9e53f1f75d7853659e2a20eeb2b22aafde6419a058ab4f6f746bf4"
     "0fc0c3b780f244452da3ebf1c5d82cdea2418997200ef82e44ae7e3f", "a44a8266ee1c8eb0c8b5d4cf5ae9f19a"),
]  # fmt: skip


def _case_id(case: tuple[int, str, str, str, str, str, str]) -> str:
    return f"tc{case[0]}"


@pytest.mark.parametrize("case", [c for c in SPEC_CASES if len(c[2]) == 24], ids=_case_id)
def test_spec_test_cases(
    gcm_backend: aescore.Backend, case: tuple[int, str, str, str, str, str, str]
) -> None:
    key_b, iv_b, pt_b, aad_b, ct_b, tag_b = (bytes.fromhex(field) for field in case[1:])
    gcm = aescore.AesGcm(gcm_backend, key_b)
    assert gcm.encrypt(iv_b, pt_b, aad_b or None) == ct_b + tag_b
    assert gcm.decrypt(iv_b, ct_b + tag_b, aad_b) == pt_b
    out = bytearray(len(pt_b) + 16)
    assert gcm.encrypt_into(iv_b, pt_b, aad_b, out) == len(out) and out == ct_b + tag_b
    plain = bytearray(len(pt_b))
    assert gcm.decrypt_into(iv_b, memoryview(out), bytearray(aad_b), plain) == len(pt_b) and plain == pt_b


@pytest.mark.parametrize("case", [c for c in SPEC_CASES if len(c[2]) != 24], ids=_case_id)
def test_spec_cases_with_other_iv_lengths(
    gcm_backend: aescore.Backend, case: tuple[int, str, str, str, str, str, str]
) -> None:
    """AesGcm takes 12-byte nonces only; the other IVs still check the backend's CTR and our GHASH.

    For an IV that is not 96 bits, J0 = GHASH_H(IV) with the lengths block (0, len(IV)): exactly
    ``digest(b"", IV)``. Data block i uses inc32 of J0, i + 1 times.
    """
    key, iv, plaintext, aad, ciphertext, tag = (bytes.fromhex(field) for field in case[1:])
    with pytest.raises(aescore.AesCoreValueError, match=f"nonce must be 12 bytes long, got {len(iv)} bytes"):
        aescore.AesGcm(gcm_backend, key).encrypt(iv, plaintext, aad)
    expanded = gcm_backend.expand_key(key)
    hash_key = gcm_backend.ctr_xor(expanded, bytes(16), bytes(16))
    assert hash_key is not None
    ghash = PythonGhash(hash_key)
    j0 = ghash.digest(memoryview(b""), memoryview(iv))
    prefix, low = j0[:12], int.from_bytes(j0[12:], "big")
    blocks = b"".join(
        prefix + ((low + 1 + i) % 2**32).to_bytes(4, "big") for i in range(len(plaintext) // 16 + 1)
    )
    keystream = b"".join(
        gcm_backend.ctr_xor(expanded, blocks[i : i + 16], bytes(16)) or b"" for i in range(0, len(blocks), 16)
    )
    assert bytes(a ^ b for a, b in zip(plaintext, keystream, strict=False)) == ciphertext
    mask = gcm_backend.ctr_xor(expanded, j0, bytes(16))
    assert mask is not None
    digest = ghash.digest(memoryview(aad), memoryview(ciphertext))
    assert bytes(a ^ b for a, b in zip(digest, mask, strict=True)) == tag


# GNU Nettle's testsuite/gcm-test.c "Test 128 bytes": test case 3's key and IV, eight plaintext blocks.
NETTLE_128 = (
    K1,
    IV12,
    P64 + "5ae376bc5e9f6a1b08e34db7a6ee07369ba662ea12f6f197e6bc3ed69d2480f3"
    "ea5691347f2ba69113eb37910ebc18c80f697234582016fa956ca8f63ae6b473",
    "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa05"
    "1ba30b396a0aac973d58e091473f5985874b1178906ddbeab04ab2fe6cce8c578d7e961bd13fd6a8c56b66ca5e576492"
    "1a48cd8bda04e66343e73055118b69b9ced486813846958a11e602c03cfc232b",
    "796836f1246c9d735c5e1be0a715ccc3",
)


def test_nettle_eight_block_case(gcm_backend: aescore.Backend) -> None:
    key, iv, plaintext, ciphertext, tag = (bytes.fromhex(field) for field in NETTLE_128)
    gcm = aescore.AesGcm(gcm_backend, key)
    assert gcm.encrypt(iv, plaintext, None) == ciphertext + tag
    assert gcm.decrypt(iv, ciphertext + tag, b"") == plaintext


def test_spec_ghash_agrees_with_aesni_ghash() -> None:
    """The aesni GHASH (used by hwsim) against the pure-Python one on the specification's H values."""
    aesni = pytest.importorskip("aescore.ctr._aesni")
    if aesni.unavailable_reason() is not None:
        pytest.skip(f"aesni unavailable: {aesni.unavailable_reason()}")
    for _, key, iv, _plaintext, aad, ciphertext, _tag in SPEC_CASES:
        backend = aescore.get_backend("python")
        hash_key = backend.ctr_xor(backend.expand_key(bytes.fromhex(key)), bytes(16), bytes(16))
        assert hash_key is not None
        for associated, data in ((aad, ciphertext), ("", iv), (ciphertext, aad)):
            first, second = bytes.fromhex(associated), bytes.fromhex(data)
            expected = PythonGhash(hash_key).digest(memoryview(first), memoryview(second))
            assert aesni.AesniGhash(hash_key).digest(first, second) == expected


def _read_rsp(path: Path) -> list[dict[str, str]]:
    entries: list[dict[str, str]] = []
    section: dict[str, str] = {}
    current: dict[str, str] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            current = None
            continue
        if line.startswith("["):
            name, _, value = line[1:-1].partition("=")
            section = {**section, name.strip(): value.strip()}
            continue
        if current is None:
            current = dict(section)
            entries.append(current)
        name, _, value = line.partition("=")
        current[name.strip()] = value.strip() if name != "FAIL" else "FAIL"
    return entries


CAVP = _read_rsp(VECTORS)


def test_vector_file_has_what_its_header_says() -> None:
    official = [entry for entry in CAVP if entry["Source"] == "official"]
    assert len(official) == 12 and all(len(entry["Key"]) == 32 for entry in official)
    assert {len(entry["Key"]) for entry in CAVP} == {32, 48, 64}
    assert sum("FAIL" in entry for entry in CAVP) == 12


@pytest.mark.parametrize("entry", CAVP, ids=lambda e: f"{e['Source']}-{e['Direction']}-{e['Count']}")
def test_cavp_vectors(gcm_backend: aescore.Backend, entry: dict[str, str]) -> None:
    key, iv, aad = (bytes.fromhex(entry[name]) for name in ("Key", "IV", "AAD"))
    ciphertext, tag = bytes.fromhex(entry["CT"]), bytes.fromhex(entry["Tag"])
    gcm = aescore.AesGcm(gcm_backend, key)
    if "FAIL" in entry:
        with pytest.raises(aescore.InvalidTag):
            gcm.decrypt(iv, ciphertext + tag, aad)
        return
    plaintext = bytes.fromhex(entry["PT"])
    if entry["Direction"] == "encrypt":
        assert gcm.encrypt(iv, plaintext, aad) == ciphertext + tag
    assert gcm.decrypt(iv, ciphertext + tag, aad) == plaintext
