"""Private runs: an AES-256-GCM payload codec with key ids, and where its keys come from.

Every payload a client or worker hands to Temporal (workflow input and result,
activity inputs and results, the journal's events, stream items, query and
update answers, UI summaries and details, failure messages) is encrypted in
the process before it leaves, so the server, its database and anyone reading
history see ciphertext. Each encrypted payload names its key in its metadata
(`encryption-key-id`), so keys rotate: new payloads use the current key (the
first one configured), older ones stay readable while their key is still
configured. The key id is also bound into the ciphertext (associated data), so
a payload relabelled with another id fails instead of decrypting.

Payloads that are not encrypted pass through decoding unchanged (a run started
with plain JSON by `temporal workflow start` still works). A process with no
keys gets the same codec without keys: it encrypts nothing, and an encrypted
payload fails with an error naming the key it needs instead of the SDK's
"unknown payload encoding".

Keys come from the environment or a file, never from code or history:
`AGENTOR_ENCRYPTION_KEYS` (or a file named by `AGENTOR_ENCRYPTION_KEYS_FILE`)
holds comma- or newline-separated `key_id:base64-of-32-bytes` entries, the
first one current.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
import re
import stat
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

logger = logging.getLogger("agentor_temporal.codec")

#: Environment variables the keys are read from (the first set one wins).
KEYS_ENV = "AGENTOR_ENCRYPTION_KEYS"
KEYS_FILE_ENV = "AGENTOR_ENCRYPTION_KEYS_FILE"

#: Metadata of an encrypted payload; the Temporal UI shows the encoding
#: of a payload it cannot decode, which is how ciphertext reads there.
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
CIPHER_METADATA = "encryption-cipher"
CIPHER = b"AES-256-GCM"

KEY_BYTES = 32
#: A fresh random nonce per payload: 96 bits is GCM's native size, and random
#: nonces stay safe far beyond the payload count of any one key's lifetime.
NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NEW_KEY_HINT = (
    "make one with `agentor-temporal keygen KEY_ID` "
    "(or: python -c 'import base64,os; print(base64.b64encode(os.urandom(32)).decode())')"
)


class EncryptionConfigError(ValueError):
    """The configured keys are malformed (the message never contains key material)."""


class EncryptionKeyError(Exception):
    """A payload cannot be decrypted here: its key is not configured, or does not fit."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        #: the id of the key the payload was encrypted with
        self.key_id = key_id


@dataclasses.dataclass(frozen=True)
class EncryptionKeys:
    """Named AES-256 keys, the first one current. Its repr shows ids, never keys.

    Build it with `parse_keys`, `keys_from_file` or `keys_from_env`.
    """

    #: (key id, 32-byte key) pairs; the first encrypts, all decrypt
    entries: tuple[tuple[str, bytes], ...]
    #: where the keys came from, for messages ("AGENTOR_ENCRYPTION_KEYS", a path)
    source: str = dataclasses.field(default="keys", compare=False)

    def __post_init__(self) -> None:
        if not self.entries:
            raise EncryptionConfigError(f"{self.source}: no encryption keys given")
        _note_keys(key for _, key in self.entries)

    def __repr__(self) -> str:
        return f"EncryptionKeys(current={self.current_id!r}, ids={list(self.ids)!r})"

    @property
    def current_id(self) -> str:
        """The id of the key new payloads are encrypted with."""
        return self.entries[0][0]

    @property
    def ids(self) -> tuple[str, ...]:
        """Every configured key id, current first."""
        return tuple(key_id for key_id, _ in self.entries)

    def key(self, key_id: str) -> bytes | None:
        """The key with this id, or None."""
        for known, key in self.entries:
            if known == key_id:
                return key
        return None


#: Each key this process has held (`EncryptionKeys`) as text: masked wherever it shows
#: (`activities._redact` reads them; this module imports nothing of ours). Only ever
#: appended to, so a reader keeps its place.
_held_keys: list[tuple[str, ...]] = []
_held_lock = threading.Lock()


def _note_keys(keys: Iterable[bytes]) -> None:
    """Remember keys as a tool or a log may show them: base64 as written first, then
    unpadded, in the URL-safe alphabet, and hex (a key file read by a tool, an error
    quoting an entry)."""
    for key in keys:
        encoded, urlsafe = base64.b64encode(key).decode(), base64.urlsafe_b64encode(key).decode()
        forms = tuple(
            dict.fromkeys([encoded, encoded.rstrip("="), urlsafe, urlsafe.rstrip("="), key.hex()])
        )
        with _held_lock:
            if forms not in _held_keys:
                _held_keys.append(forms)


def held_keys(start: int = 0) -> list[tuple[str, ...]]:
    """The keys this process has held (`_note_keys`' forms of each), from the `start`th on."""
    with _held_lock:
        return _held_keys[start:]


# -- reading keys --------------------------------------------------------------------


def parse_keys(text: str, source: str = KEYS_ENV) -> EncryptionKeys:
    """Keys from `key_id:base64` entries separated by commas or newlines.

    Blank entries and lines starting with `#` are ignored (key files may
    carry comments).

    Args:
        text: the entries; the first is the current key.
        source: where they came from, named in errors.

    Raises:
        EncryptionConfigError: for a malformed entry, a key that is not 32
            bytes of base64, a bad or repeated id, or no entries at all. The
            message names the entry by position and id, never its key.
    """
    entries: list[tuple[str, bytes]] = []
    lines = [line for line in text.splitlines() if not line.strip().startswith("#")]
    items = [item.strip() for line in lines for item in line.split(",")]
    for number, item in enumerate((i for i in items if i), 1):
        key_id, sep, encoded = item.partition(":")
        key_id, encoded = key_id.strip(), encoded.strip()
        where = f"{source}, entry {number}"
        if not sep or not encoded:
            raise EncryptionConfigError(
                f"{where}: expected key_id:base64-key (e.g. 2025a:<44 base64 characters>); "
                + _NEW_KEY_HINT
            )
        check_key_id(key_id, where)
        if any(known == key_id for known, _ in entries):
            raise EncryptionConfigError(f"{where}: key id {key_id!r} is given twice")
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise EncryptionConfigError(
                f"{where} (key id {key_id!r}): the key is not valid base64; {_NEW_KEY_HINT}"
            ) from None
        if len(key) != KEY_BYTES:
            raise EncryptionConfigError(
                f"{where} (key id {key_id!r}): the key is {len(key)} bytes, AES-256 needs "
                f"{KEY_BYTES}; {_NEW_KEY_HINT}"
            )
        entries.append((key_id, key))
    if not entries:
        raise EncryptionConfigError(f"{source}: no encryption keys given; {_NEW_KEY_HINT}")
    return EncryptionKeys(tuple(entries), source)


def check_key_id(key_id: str, where: str) -> None:
    """Refuse a key id that is not 1-64 letters, digits, '.', '_' or '-' (`where` says whose).

    Raises:
        EncryptionConfigError: naming `where` and the id (not when it reads as a key).
    """
    if not _KEY_ID.match(key_id):
        raise EncryptionConfigError(
            f"{where}: bad key id {_shown_id(key_id)}: use 1-64 letters, digits, '.', '_' or '-'"
        )


def _holds_a_key(text: str) -> bool:
    """Whether `text` holds a key: an entry (`key_id:base64`) or a bare key, whose base64
    decodes to `KEY_BYTES`."""
    for item in re.split(r"[,\s]+", text):
        for part in (item, item.partition(":")[2]):
            try:
                if len(base64.b64decode(part.strip(), validate=True)) == KEY_BYTES:
                    return True
            except (binascii.Error, ValueError):
                continue
    return False


def _shown_id(key_id: str) -> str:
    """A bad key id as an error may quote it: not at all when it reads as key material
    (an entry written `base64-key:key_id`, the other way round)."""
    try:
        material = len(key_id) > 24 and len(base64.b64decode(key_id, validate=True)) >= 16
    except (binascii.Error, ValueError):
        material = False
    if material:
        return f"({len(key_id)} characters, like a key; the id comes first: key_id:base64-key)"
    return repr(key_id[:70])


def keys_from_file(path: str | os.PathLike[str]) -> EncryptionKeys:
    """Keys from a file in `parse_keys`'s format (one entry per line, say).

    A file that others can read is used, with a warning: the keys are only as
    private as it is.

    Raises:
        EncryptionConfigError: when the file cannot be read, or as `parse_keys`.
    """
    file = Path(path)
    try:
        text = file.read_text()
        mode = file.stat().st_mode
    except OSError as exc:
        if _holds_a_key(str(path)):
            # the two settings mixed up: quoted, the "path" would print the keys
            raise EncryptionConfigError(
                f"cannot read the encryption keys file: the setting naming it ({KEYS_FILE_ENV}, "
                "--encryption-keys-file or encryption_keys=Path(...)) holds a key "
                f"(key_id:base64-key), not a file's path; give key entries as {KEYS_ENV} or "
                "encryption_keys='key_id:base64,...' (the value is not shown: it is a key)"
            ) from None
        raise EncryptionConfigError(
            f"cannot read the encryption keys file {str(file)!r}: {exc.strerror or exc}"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning(
            "The encryption keys file %s can be read by others (mode %o); `chmod 600` it",
            file,
            stat.S_IMODE(mode),
        )
    return parse_keys(text, source=str(file))


def keys_from_env(environ: Mapping[str, str] | None = None) -> EncryptionKeys | None:
    """Keys from `AGENTOR_ENCRYPTION_KEYS`, else the file `AGENTOR_ENCRYPTION_KEYS_FILE` names.

    Returns:
        The keys, or None when neither is set (encryption off).

    Raises:
        EncryptionConfigError: when both are set, or the keys are malformed.
    """
    env = os.environ if environ is None else environ
    text, path = env.get(KEYS_ENV, "").strip(), env.get(KEYS_FILE_ENV, "").strip()
    if text and path:
        raise EncryptionConfigError(f"both {KEYS_ENV} and {KEYS_FILE_ENV} are set; set one of them")
    if text:
        return parse_keys(text, source=KEYS_ENV)
    if path:
        return keys_from_file(path)
    return None


KeysSetting = EncryptionKeys | str | os.PathLike[str] | None


def resolve_keys(setting: KeysSetting) -> EncryptionKeys | None:
    """Keys from a setting: `EncryptionKeys`, entries as text, a key file's path, or None.

    None reads the environment (`keys_from_env`); a `str` is entries in
    `parse_keys`'s format; a `pathlib.Path` (any `os.PathLike`) is a key file.

    Raises:
        EncryptionConfigError: for malformed keys or an unreadable file.
    """
    if setting is None:
        return keys_from_env()
    if isinstance(setting, EncryptionKeys):
        return setting
    if isinstance(setting, str):
        return parse_keys(setting, source="encryption_keys")
    if isinstance(setting, os.PathLike):
        return keys_from_file(setting)
    raise TypeError(
        "encryption_keys must be EncryptionKeys, 'key_id:base64,...' text or a pathlib.Path "
        f"of a key file, not {type(setting).__name__}"
    )


def new_key() -> str:
    """A fresh random key, base64 (for `key_id:<this>`)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


# -- the codec ----------------------------------------------------------------------------


def is_encrypted(payload: Payload) -> bool:
    """Whether this codec encrypted `payload`."""
    return payload.metadata.get("encoding") == ENCODING


def key_id_of(payload: Payload) -> str:
    """The id of the key an encrypted payload names."""
    return payload.metadata.get(KEY_ID_METADATA, b"").decode("utf-8", "replace")


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise EncryptionConfigError(
            "payload encryption needs the `cryptography` package: "
            "pip install 'agentor-temporal[encryption]'"
        ) from None
    return AESGCM(key)


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole payloads, with the key id in each one's metadata.

    Args:
        keys: the keys, or None for a process without keys (it encrypts
            nothing and names the missing key of any encrypted payload).
    """

    def __init__(self, keys: EncryptionKeys | None) -> None:
        self.keys = keys
        self._ciphers = {key_id: _aesgcm(key) for key_id, key in keys.entries} if keys else {}

    def __repr__(self) -> str:
        return f"EncryptionCodec({self.keys!r})"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypt each payload with the current key (none without keys)."""
        return self.encrypt(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Decrypt each encrypted payload; others pass through.

        Raises:
            EncryptionKeyError: naming the key a payload needs, when it is not
                configured or does not decrypt it.
        """
        return self.decrypt(payloads)

    def encrypt(self, payloads: Iterable[Payload]) -> list[Payload]:
        """`encode`, synchronously (for the codec server)."""
        if self.keys is None:
            return list(payloads)
        key_id = self.keys.current_id
        cipher = self._ciphers[key_id]
        aad = key_id.encode("utf-8")
        out = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed = cipher.encrypt(nonce, payload.SerializeToString(), aad)
            out.append(
                Payload(
                    metadata={
                        "encoding": ENCODING,
                        KEY_ID_METADATA: aad,
                        CIPHER_METADATA: CIPHER,
                    },
                    data=nonce + sealed,
                )
            )
        return out

    def decrypt(self, payloads: Iterable[Payload]) -> list[Payload]:
        """`decode`, synchronously (for the codec server)."""
        return [self._decrypt_one(p) if is_encrypted(p) else p for p in payloads]

    def _decrypt_one(self, payload: Payload) -> Payload:
        key_id = key_id_of(payload)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(self._missing(key_id), key_id)
        from cryptography.exceptions import InvalidTag

        data = payload.data
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode("utf-8"))
        except (InvalidTag, ValueError):
            raise EncryptionKeyError(
                f"A payload encrypted with key {key_id!r} does not decrypt with the key "
                f"configured under that id (from {self.keys.source if self.keys else '?'}): "
                "the key differs from the one that encrypted it, or the payload was altered.",
                key_id,
            ) from None
        decoded = Payload()
        decoded.ParseFromString(plain)
        return decoded

    def _missing(self, key_id: str) -> str:
        if self.keys is None:
            return (
                f"This data is encrypted with key {key_id!r}, and no encryption keys are "
                f"configured here: set {KEYS_ENV} (or {KEYS_FILE_ENV}, Agentor(encryption_keys="
                f"...), --encryption-keys-file) with the key {key_id!r}."
            )
        have = ", ".join(repr(i) for i in self.keys.ids)
        return (
            f"This data is encrypted with key {key_id!r}, which is not configured here "
            f"(keys {have} from {self.keys.source}): add {key_id!r} after the current key "
            "to read runs written under it."
        )


class _Chained(PayloadCodec):
    """A user's own codec (compression, say) applied before encryption."""

    def __init__(self, inner: PayloadCodec, outer: PayloadCodec) -> None:
        self.inner, self.outer = inner, outer

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.outer.encode(await self.inner.encode(payloads))

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.inner.decode(await self.outer.decode(payloads))


def encryption_codec_of(converter: DataConverter) -> EncryptionCodec | None:
    """The `EncryptionCodec` a converter uses, if any."""
    codec = converter.payload_codec
    if isinstance(codec, _Chained):
        codec = codec.outer
    return codec if isinstance(codec, EncryptionCodec) else None


def writes_payloads_as_they_are(converter: DataConverter) -> bool:
    """Whether payloads reach history as the converter made them (metadata and all).

    True with no codec and no external storage, or with our codec holding no
    keys (it then encrypts nothing): what a run needs to send its spec in a
    start header, which Temporal does not pass through a codec, and to close
    with its last events in its result's metadata.
    """
    codec = converter.payload_codec
    plain = codec is None or (isinstance(codec, EncryptionCodec) and codec.keys is None)
    return plain and getattr(converter, "external_storage", None) is None


def encrypted_data_converter(
    keys: EncryptionKeys | None, base: DataConverter | None = None
) -> DataConverter:
    """A `DataConverter` that encrypts every payload with `keys`.

    With keys, failure messages and stack traces move into the failure's
    encoded attributes (so they are encrypted too). Without keys, nothing is
    encrypted, but encrypted payloads fail with an error naming their key.
    A codec `base` already has (not ours) is kept and applied before
    encryption; an `EncryptionCodec` in `base` is replaced.

    Args:
        keys: from `keys_from_env()`, `keys_from_file(...)` or `parse_keys(...)`.
        base: the converter to extend (default: the SDK's default).
    """
    base = base or DataConverter.default
    codec: PayloadCodec = EncryptionCodec(keys)
    existing = base.payload_codec
    if isinstance(existing, _Chained):
        existing = existing.inner
    if existing is not None and not isinstance(existing, EncryptionCodec):
        codec = _Chained(existing, codec)
    failures = base.failure_converter_class
    if keys is not None and failures is DefaultFailureConverter:
        failures = DefaultFailureConverterWithEncodedAttributes
    return dataclasses.replace(base, payload_codec=codec, failure_converter_class=failures)
