"""A Temporal frontend behind TLS for tests: certificates and a TLS-terminating proxy.

`temporal server start-dev` serves plain gRPC only, so the TLS tests put this
proxy in front of it: it speaks TLS 1.2+ with ALPN `h2` (gRPC needs it) on
its own port, optionally requires a client certificate signed by the test CA
(mTLS), and pipes the decrypted bytes to the dev server. The certificates are
made with `cryptography`: a CA, a server certificate for localhost/127.0.0.1,
and a client certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Certs:
    """PEM files: the CA, the server's pair, and a client's pair."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def make_certs(directory: Path) -> Certs:
    """A fresh CA, and server and client certificates it signed, as PEM files in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("agentor test CA"))
        .issuer_name(_name("agentor test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        common: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName] | None
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf(
        "localhost",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client, client_key = leaf("agentor-worker", ExtendedKeyUsageOID.CLIENT_AUTH, None)

    def pem(cert: x509.Certificate, name: str) -> Path:
        path = directory / name
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    return Certs(
        ca=pem(ca, "ca.pem"),
        server_cert=pem(server, "server.pem"),
        server_key=_write_key(server_key, directory / "server.key"),
        client_cert=pem(client, "client.pem"),
        client_key=_write_key(client_key, directory / "client.key"),
    )


class TlsProxy:
    """TLS (optionally mutual) on 127.0.0.1:`port`, plain TCP to `upstream`; a context manager.

    Runs its own event loop on a thread. `handshakes` counts completed TLS
    handshakes, `refused` the ones that failed (no or untrusted client cert).
    """

    def __init__(self, upstream: str, certs: Certs, *, require_client_cert: bool) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host or "127.0.0.1", int(port))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certs.server_cert, certs.server_key)
        context.set_alpn_protocols(["h2"])
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(certs.ca)
        self.context = context
        self.handshakes = 0
        self.refused = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> asyncio.Server:
        return await self._loop.create_server(lambda: _Client(self), "127.0.0.1", 0)

    async def secure(self, client: _Client, transport: asyncio.Transport) -> None:
        """Handshake on an accepted connection, then connect it to the upstream."""
        # done here rather than by create_server(ssl=...), which keeps a failed
        # handshake to itself: a refused client certificate is counted
        try:
            tls = await asyncio.wait_for(
                self._loop.start_tls(transport, client, self.context, server_side=True), 10
            )
        except (ssl.SSLError, OSError, asyncio.TimeoutError):
            self.refused += 1
            transport.close()
            return
        if tls is None:
            transport.close()
            return
        self.handshakes += 1
        client.transport = tls
        try:
            upstream, _ = await self._loop.create_connection(lambda: _Upstream(tls), *self.upstream)
        except OSError:
            tls.close()
            return
        client.attach(upstream)


class _Client(asyncio.Protocol):
    """The accepted side: decrypted bytes go to the upstream (buffered until it is there)."""

    def __init__(self, proxy: TlsProxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.BaseTransport | None = None
        self.upstream: asyncio.Transport | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        # paused at once, so the ClientHello waits in the socket for start_tls
        transport.pause_reading()
        self.transport = transport
        asyncio.get_running_loop().create_task(self.proxy.secure(self, transport))

    def attach(self, upstream: asyncio.Transport) -> None:
        self.upstream = upstream
        for chunk in self.pending:
            upstream.write(chunk)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.pending.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


class _Upstream(asyncio.Protocol):
    """The dev server's side: its bytes go back through TLS."""

    def __init__(self, client: asyncio.BaseTransport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        assert isinstance(self.client, asyncio.WriteTransport)
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()
