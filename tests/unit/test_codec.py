"""The payload codec: AES-256-GCM with key ids, rotation, and errors that name the key."""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.exceptions import ApplicationError

from agentor_temporal.codec import (
    KEY_ID_METADATA,
    EncryptionCodec,
    EncryptionConfigError,
    EncryptionKeyError,
    EncryptionKeys,
    encrypted_data_converter,
    encryption_codec_of,
    keys_from_env,
    keys_from_file,
    new_key,
    parse_keys,
    resolve_keys,
)

SECRET = "What is the weather in Quixotica?"
KEY_A, KEY_B = new_key(), new_key()


def keys(text: str) -> EncryptionKeys:
    return parse_keys(text.replace("{A}", KEY_A).replace("{B}", KEY_B))


async def test_payloads_are_encrypted_with_the_current_key_and_decrypt_back() -> None:
    """Encoding hides the value and names the current key; decoding restores it exactly."""
    converter = encrypted_data_converter(keys("A:{A}"))
    [payload] = await converter.encode([{"input": SECRET}])
    assert payload.metadata["encoding"] == b"binary/encrypted"
    assert payload.metadata[KEY_ID_METADATA] == b"A"
    assert b"Quixotica" not in payload.SerializeToString()
    assert await converter.decode([payload]) == [{"input": SECRET}]
    # a fresh nonce per payload: the same value never encrypts the same way twice
    [again] = await converter.encode([{"input": SECRET}])
    assert again.data != payload.data


async def test_rotation_reads_old_keys_and_writes_with_the_new_one() -> None:
    """With B current and A still configured, A's payloads decode and new ones use B."""
    [old] = await encrypted_data_converter(keys("A:{A}")).encode([SECRET])
    rotated = encrypted_data_converter(keys("B:{B},A:{A}"))
    assert await rotated.decode([old]) == [SECRET]
    [new] = await rotated.encode([SECRET])
    assert new.metadata[KEY_ID_METADATA] == b"B"


async def test_a_removed_key_is_named_in_the_error() -> None:
    """Once A is removed, decoding its payloads fails naming A (and the keys there are)."""
    [old] = await encrypted_data_converter(keys("A:{A}")).encode([SECRET])
    with pytest.raises(EncryptionKeyError, match=r"key 'A', which is not configured") as info:
        await encrypted_data_converter(keys("B:{B}")).decode([old])
    assert info.value.key_id == "A"
    assert "'B'" in str(info.value)


async def test_a_process_without_keys_names_the_key_it_needs() -> None:
    """No keys at all: plain payloads pass, encrypted ones fail naming the key, never garbage."""
    [old] = await encrypted_data_converter(keys("A:{A}")).encode([SECRET])
    plain = encrypted_data_converter(None)
    with pytest.raises(EncryptionKeyError, match=r"key 'A', and no encryption keys") as info:
        await plain.decode([old])
    assert "AGENTOR_ENCRYPTION_KEYS" in str(info.value)
    [unencrypted] = await plain.encode([SECRET])
    assert unencrypted.metadata["encoding"] == b"json/plain"
    # a keyed process reads plain payloads (runs started by `temporal workflow start`)
    assert await encrypted_data_converter(keys("A:{A}")).decode([unencrypted]) == [SECRET]


async def test_a_different_key_under_the_same_id_or_a_tampered_payload_fails_clearly() -> None:
    """GCM's tag check: a wrong key or altered bytes are an error naming the key, not garbage."""
    [payload] = await encrypted_data_converter(keys("A:{A}")).encode([SECRET])
    with pytest.raises(EncryptionKeyError, match="does not decrypt"):
        await encrypted_data_converter(keys("A:{B}")).decode([payload])
    tampered = Payload()
    tampered.CopyFrom(payload)
    tampered.data = payload.data[:-1] + bytes([payload.data[-1] ^ 1])
    with pytest.raises(EncryptionKeyError, match="does not decrypt"):
        await encrypted_data_converter(keys("A:{A}")).decode([tampered])
    # the key id is bound to the ciphertext: relabelling it does not help
    relabelled = Payload()
    relabelled.CopyFrom(payload)
    relabelled.metadata[KEY_ID_METADATA] = b"B"
    with pytest.raises(EncryptionKeyError, match="key 'B'"):
        await encrypted_data_converter(keys("B:{A}")).decode([relabelled])


async def test_failure_messages_are_encrypted_too() -> None:
    """With keys, a failure's message and stack trace travel encrypted, and come back."""
    converter = encrypted_data_converter(keys("A:{A}"))
    failure = Failure()
    await converter.encode_failure(ApplicationError(f"tool failed for {SECRET}"), failure)
    assert "Quixotica" not in failure.message
    assert b"Quixotica" not in failure.SerializeToString()
    error = await converter.decode_failure(failure)
    assert SECRET in str(error)


async def test_a_users_own_codec_is_kept_under_encryption() -> None:
    """A converter's existing codec (compression, say) runs first, then encryption."""

    class Upper(PayloadCodec):
        async def encode(self, payloads: object) -> list[Payload]:
            return [Payload(metadata=p.metadata, data=p.data.upper()) for p in payloads]  # type: ignore[attr-defined]

        async def decode(self, payloads: object) -> list[Payload]:
            return [Payload(metadata=p.metadata, data=p.data.lower()) for p in payloads]  # type: ignore[attr-defined]

    base = DataConverter(payload_codec=Upper())
    converter = encrypted_data_converter(keys("A:{A}"), base)
    [payload] = await converter.encode(["abc"])
    assert payload.metadata["encoding"] == b"binary/encrypted"
    assert await converter.decode([payload]) == ["abc"]
    assert isinstance(encryption_codec_of(converter), EncryptionCodec)
    # re-keying replaces our codec, keeps theirs
    rekeyed = encrypted_data_converter(keys("B:{B},A:{A}"), converter)
    assert await rekeyed.decode([payload]) == ["abc"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no encryption keys given"),
        ("A", "expected key_id:base64-key"),
        ("A:not-base64!", "not valid base64"),
        # a fixed id: the key is random, and xdist workers must collect the same ids
        pytest.param(
            "A:" + base64.b64encode(os.urandom(16)).decode(),
            "16 bytes, AES-256 needs 32",
            id="A:<16 random bytes>-16 bytes, AES-256 needs 32",
        ),
        ("A:{A},A:{B}", "key id 'A' is given twice"),
        ("bad id:{A}", "bad key id 'bad id'"),
        ("A:{A},:{B}", "entry 2: bad key id ''"),
        # the key and its id swapped: the "id" is key material, never quoted
        ("{A}:A", "entry 1: bad key id \\(44 characters, like a key; the id comes first"),
        ("B:{B},{A}:A", "entry 2: bad key id \\(44 characters"),
    ],
)
def test_malformed_keys_are_refused_without_echoing_key_material(text: str, message: str) -> None:
    """Each mistake gets its own message naming the entry, and never the key itself."""
    with pytest.raises(EncryptionConfigError, match=message) as info:
        keys(text)
    assert KEY_A not in str(info.value) and KEY_B not in str(info.value)


def test_keys_repr_shows_ids_only() -> None:
    """A logged or printed key set shows which keys, never what they are."""
    configured = keys("B:{B},A:{A}")
    assert repr(configured) == "EncryptionKeys(current='B', ids=['B', 'A'])"
    assert KEY_A not in repr(EncryptionCodec(configured))


@pytest.mark.parametrize("given", ["file", "text", "env"])
def test_keys_read_from_a_file_or_given_as_text_are_masked_wherever_they_show(
    tmp_path: Path, given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key the process read from a key file (`--encryption-keys-file`, `show`/`export`
    of an encrypted run) or was given as text is a secret of it: masked in content and
    error text, as base64 of either alphabet, padded or not, and hex of either case.
    From `AGENTOR_ENCRYPTION_KEYS` (a credential variable) only its base64 as written was."""
    from agentor_temporal.activities._redact import clean, mask_secrets

    encoded = new_key()
    raw = base64.b64decode(encoded)
    if given == "file":
        path = tmp_path / "keys.txt"
        path.write_text(f"k1:{encoded}\n")
        path.chmod(0o600)
        keys_from_file(path)
    elif given == "text":
        resolve_keys(f"k1:{encoded}")
    else:
        monkeypatch.setenv("AGENTOR_ENCRYPTION_KEYS", f"k1:{encoded}")
        keys_from_env()
    urlsafe = base64.urlsafe_b64encode(raw).decode()
    forms = [encoded, encoded.rstrip("="), urlsafe.rstrip("="), raw.hex(), raw.hex().upper()]
    text = "key file: k1:" + " | ".join(forms)
    for shown in (mask_secrets(text), clean(text)):
        # the variable's whole value (`k1:<key>`) is one of its secrets too
        assert shown.replace("k1:***", "***") == "key file: " + " | ".join(["***"] * 5), shown


def test_keys_come_from_the_environment_or_a_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """AGENTOR_ENCRYPTION_KEYS, else AGENTOR_ENCRYPTION_KEYS_FILE; both set is an error."""
    assert keys_from_env({}) is None
    assert keys_from_env({"AGENTOR_ENCRYPTION_KEYS": f"A:{KEY_A}"}) == keys("A:{A}")
    path = tmp_path / "keys.txt"
    path.write_text(f"# rotated 2025-07\nB:{KEY_B}\nA:{KEY_A}\n")
    path.chmod(0o600)
    from_file = keys_from_env({"AGENTOR_ENCRYPTION_KEYS_FILE": str(path)})
    assert from_file is not None and from_file.ids == ("B", "A")
    with pytest.raises(EncryptionConfigError, match="both"):
        keys_from_env(
            {"AGENTOR_ENCRYPTION_KEYS": f"A:{KEY_A}", "AGENTOR_ENCRYPTION_KEYS_FILE": str(path)}
        )
    with pytest.raises(EncryptionConfigError, match="cannot read the encryption keys file"):
        keys_from_file(tmp_path / "missing.txt")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="agentor_temporal.codec"):
        keys_from_file(path)
    assert "can be read by others" in caplog.text
    # every way the facade takes them
    assert resolve_keys(path) == from_file
    assert resolve_keys(f"A:{KEY_A}") == keys("A:{A}")
    assert resolve_keys(from_file) is from_file
    with pytest.raises(TypeError, match="encryption_keys must be"):
        resolve_keys(b"A:xyz")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "where", ["env", "path"], ids=["AGENTOR_ENCRYPTION_KEYS_FILE", "encryption_keys=Path"]
)
def test_keys_given_where_a_file_is_named_are_never_shown(tmp_path: Path, where: str) -> None:
    """Key entries set as the keys file's path (the two settings mixed up): the error says
    so, and quotes neither the entries nor their keys."""
    entries = f"A:{KEY_A},B:{KEY_B}"
    with pytest.raises(EncryptionConfigError) as failed:
        if where == "env":
            keys_from_env({"AGENTOR_ENCRYPTION_KEYS_FILE": entries})
        else:
            resolve_keys(Path(entries))
    message = str(failed.value)
    assert (
        "cannot read the encryption keys file" in message and "AGENTOR_ENCRYPTION_KEYS" in message
    )
    assert KEY_A[:12] not in message and KEY_B[:12] not in message, message
    # a path that is a path is still named
    with pytest.raises(EncryptionConfigError, match="missing.txt"):
        keys_from_file(tmp_path / "missing.txt")


def test_agents_and_workers_take_keys_from_their_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad keys fail at construction; a worker uses its flag, else the env, else its agents'."""
    import argparse

    from agentor_temporal import Agentor
    from agentor_temporal.worker import ConfigError, worker_keys

    monkeypatch.delenv("AGENTOR_ENCRYPTION_KEYS", raising=False)
    monkeypatch.delenv("AGENTOR_ENCRYPTION_KEYS_FILE", raising=False)
    with pytest.raises(EncryptionConfigError, match="encryption_keys, entry 1"):
        Agentor(name="a", encryption_keys="A:short")
    a = Agentor(name="a", encryption_keys=f"A:{KEY_A}")
    b = Agentor(name="b", encryption_keys=f"B:{KEY_B}")
    plain = Agentor(name="c")
    assert a.encryption_keys == keys("A:{A}") and plain.encryption_keys is None

    no_flag = argparse.Namespace(encryption_keys_file=None)
    assert worker_keys(no_flag, [plain]) is None
    assert worker_keys(no_flag, [a, plain]) == keys("A:{A}")
    with pytest.raises(ConfigError, match="different encryption keys"):
        worker_keys(no_flag, [a, b])
    monkeypatch.setenv("AGENTOR_ENCRYPTION_KEYS", f"B:{KEY_B}")
    assert worker_keys(no_flag, [a]) == keys("B:{B}")
    path = tmp_path / "keys.txt"
    path.write_text(f"A:{KEY_A}\n")
    path.chmod(0o600)
    assert worker_keys(argparse.Namespace(encryption_keys_file=str(path)), [b]) == keys("A:{A}")
