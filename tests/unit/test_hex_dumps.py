"""A known key in a hex dump (`workflows.hex_dumps`): its bytes' digits and its column."""

from __future__ import annotations

import os

import pytest

from agentor_temporal.workflows.hex_dumps import mask_dumped
from agentor_temporal.workflows.redaction import mask_all, secret_forms

KEY = "sk-unit_Q7wE2rT9yU4iO1pA8sDf3Gh6Jk"
FILE = f"DEBUG=1\nOPENAI_API_KEY={KEY}\nPORT=8080\n".encode()
XXD = (
    "00000000: 4445 4255 473d 310a 4f50 454e 4149 5f41  DEBUG=1.OPENAI_A\n"
    "00000010: 5049 5f4b 4559 3d73 6b2d 756e 6974 5f51  PI_KEY=sk-unit_Q\n"
    "00000020: 3777 4532 7254 3979 5534 694f 3170 4138  7wE2rT9yU4iO1pA8\n"
    "00000030: 7344 6633 4768 364a 6b0a 504f 5254 3d38  sDf3Gh6Jk.PORT=8\n"
    "00000040: 3038 300a                                080.\n"
)


def test_an_xxd_dump_has_the_keys_digits_and_characters_masked_and_its_layout_kept() -> None:
    shown = mask_all(XXD, secret_forms(KEY))
    assert shown == (
        "00000000: 4445 4255 473d 310a 4f50 454e 4149 5f41  DEBUG=1.OPENAI_A\n"
        "00000010: 5049 5f4b 4559 3d** **** **** **** ****  PI_KEY=*********\n"
        "00000020: **** **** **** **** **** **** **** ****  ****************\n"
        "00000030: **** **** **** **** **0a 504f 5254 3d38  *********.PORT=8\n"
        "00000040: 3038 300a                                080.\n"
    )


@pytest.mark.parametrize(
    "dump",
    [
        FILE.hex(" "),
        FILE.hex(":").upper(),
        "key bytes: " + FILE.hex(" ", 2),
        " ".join(f"{b:02x}" for b in KEY.encode("utf-16-le")),  # a UTF-16 file's bytes
        "\t0x0000:  " + FILE[:16].hex(" ", 2) + "\n\t0x0010:  " + FILE[16:].hex(" ", 2),
    ],
)
def test_a_dumps_digits_spelling_the_key_are_masked(dump: str) -> None:
    shown = mask_dumped(dump, secret_forms(KEY))
    assert len(shown) == len(dump) and "**" in shown
    digits = "".join(c for c in shown if c in "0123456789abcdefABCDEF*")
    assert "**" * len(KEY) in digits.replace("**00", "**").replace("00**", "**")


def test_a_text_without_the_key_is_left_as_it_is() -> None:
    other = XXD.replace("6b2d", "6b2e")  # one byte of the key changed
    assert mask_dumped(other, secret_forms(KEY)) is other
    table = " ".join(str(n % 90 + 10) for n in range(5000))
    assert mask_dumped(table, secret_forms(KEY)) is table


def test_a_long_line_of_digits_is_read_whole() -> None:
    data = os.urandom(20_000) + KEY.encode() + os.urandom(20_000)
    shown = mask_dumped(data.hex(" "), secret_forms(KEY))
    assert KEY.encode().hex(" ") not in shown and shown.count("**") == len(KEY)
