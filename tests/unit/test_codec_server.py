"""The codec server speaks Temporal's remote codec protocol, with CORS and a token check."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from agentor_temporal.codec import encrypted_data_converter, new_key, parse_keys
from agentor_temporal.codec_server import CodecServer

UI = "http://localhost:8233"
KEYS = parse_keys(f"B:{new_key()},A:{new_key()}")


def post(
    url: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "X-Namespace": "default", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def as_json(payloads: Any) -> dict[str, Any]:
    return json_format.MessageToDict(Payloads(payloads=payloads))


def test_decode_and_encode_round_trip_as_the_ui_calls_them() -> None:
    """POST /decode turns the worker's ciphertext into JSON payloads; /encode goes back."""
    [encrypted] = asyncio.run(encrypted_data_converter(KEYS).encode([{"city": "Quixotica"}]))
    with CodecServer(KEYS, port=0, origins=[UI]) as server:
        status, headers, body = post(f"{server.url}/decode", as_json([encrypted]), {"Origin": UI})
        assert status == 200
        assert headers["Access-Control-Allow-Origin"] == UI
        [decoded] = body["payloads"]
        assert base64.b64decode(decoded["metadata"]["encoding"]) == b"json/plain"
        assert json.loads(base64.b64decode(decoded["data"])) == {"city": "Quixotica"}

        status, _, body = post(f"{server.url}/encode", body)
        assert status == 200
        [again] = body["payloads"]
        assert base64.b64decode(again["metadata"]["encryption-key-id"]) == b"B"
        # a path prefix in the endpoint works too (the UI appends /decode to it)
        status, _, body = post(f"{server.url}/codec/decode", {"payloads": [again]})
        assert json.loads(base64.b64decode(body["payloads"][0]["data"])) == {"city": "Quixotica"}


def test_cors_preflight_answers_only_the_ui_origin() -> None:
    """The browser's preflight gets CORS headers for the UI's origin, none for others."""
    with CodecServer(KEYS, port=0, origins=[UI]) as server:

        def preflight(origin: str) -> dict[str, str]:
            request = urllib.request.Request(
                f"{server.url}/decode",
                method="OPTIONS",
                headers={
                    "Origin": origin,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
                },
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 204
                return dict(response.headers)

        allowed = preflight(UI)
        assert allowed["Access-Control-Allow-Origin"] == UI
        assert "POST" in allowed["Access-Control-Allow-Methods"]
        assert "x-namespace" in allowed["Access-Control-Allow-Headers"].lower()
        assert "authorization" in allowed["Access-Control-Allow-Headers"].lower()
        assert "Access-Control-Allow-Origin" not in preflight("https://evil.example")


def test_a_token_is_required_when_configured() -> None:
    """With a token, a request without `Authorization: Bearer <token>` is refused (401)."""
    with CodecServer(KEYS, port=0, origins=[UI], token="s3cret") as server:
        assert post(f"{server.url}/decode", {"payloads": []})[0] == 401
        assert (
            post(f"{server.url}/decode", {"payloads": []}, {"Authorization": "Bearer no"})[0] == 401
        )
        ok = post(f"{server.url}/decode", {"payloads": []}, {"Authorization": "Bearer s3cret"})
        assert ok[0] == 200 and ok[2] == {"payloads": []}


def test_bad_requests_get_clear_answers() -> None:
    """Not JSON: 400 saying what is expected; unknown path: 404."""
    with CodecServer(KEYS, port=0) as server:
        status, _, body = post(f"{server.url}/decode", b"{not json")
        assert status == 400 and "payloads" in body["error"]
        assert post(f"{server.url}/other", {"payloads": []})[0] == 404


def test_a_payload_under_an_unknown_key_comes_back_as_it_was(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One unreadable payload does not hide the page: it stays encrypted, the rest decode."""
    other = parse_keys(f"Z:{new_key()}")
    converter = encrypted_data_converter(other)
    [foreign] = asyncio.run(converter.encode(["x"]))
    [ours] = asyncio.run(encrypted_data_converter(KEYS).encode(["y"]))
    with CodecServer(KEYS, port=0) as server:
        status, _, body = post(f"{server.url}/decode", as_json([foreign, ours]))
    assert status == 200
    first, second = body["payloads"]
    assert base64.b64decode(first["metadata"]["encryption-key-id"]) == b"Z"
    assert json.loads(base64.b64decode(second["data"])) == "y"
    assert "key 'Z'" in caplog.text


def test_a_token_given_as_the_token_files_path_is_never_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """`--token-file <the token>` (the two settings mixed up) fails without printing the
    token; a missing file's path is still named, once."""
    from agentor_temporal.cli import execute

    monkeypatch.setenv("AGENTOR_ENCRYPTION_KEYS", f"A:{new_key()}")
    token = base64.urlsafe_b64encode(b"codec-token-0059-" + bytes(range(16))).decode()
    missing = str(tmp_path / "codec.token")
    for given in (token, missing):
        assert execute(["codec-server", "--token-file", given]) != 0
    err = capsys.readouterr().err
    assert token not in err and "looks like a token" in err and "AGENTOR_CODEC_TOKEN" in err
    assert err.count(missing) == 1, err
