"""The types that cross the wire decode without evaluating strings.

Temporal's data converter calls `typing.get_type_hints` on a dataclass every
time it decodes one (an activity's input, a result, the workflow's input), and
nothing caches it. Annotations written as strings (`from __future__ import
annotations`) are evaluated again on each call: 150-330 us per type, measured,
~1.3 ms of a seed run's worker CPU; as real objects, 22-65 us.
"""

from __future__ import annotations

import dataclasses

import pytest
from temporalio.converter import DataConverter

from agentor_temporal.workflows import activity_types, types

WIRE = [
    cls
    for module in (activity_types, types)
    for cls in vars(module).values()
    if dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
]


@pytest.mark.parametrize("cls", WIRE, ids=lambda cls: cls.__name__)
def test_a_wire_type_has_no_string_annotations(cls: type) -> None:
    strings = [f.name for f in dataclasses.fields(cls) if isinstance(f.type, str)]
    assert not strings, f"{cls.__name__}: {strings} (see this module's docstring)"


def test_the_wire_types_are_all_found() -> None:
    names = {cls.__name__ for cls in WIRE}
    assert {"AgentRunInput", "AgentSpec", "GenerateInput", "CallToolResult"} <= names


def test_a_nested_wire_type_still_decodes() -> None:
    """A field typed with a class defined in the same module decodes into that class."""
    converter = DataConverter.default.payload_converter
    inp = activity_types.GenerateInput(
        run_id="r",
        agent="a",
        model="m",
        messages=[],
        turn=1,
        journal=activity_types.JournalInput(
            run_id="r", agent="a", mirror=False, start=0, events=[], new_from=0
        ),
    )
    payload = converter.to_payload(inp)
    decoded = converter.from_payload(payload, activity_types.GenerateInput)
    assert isinstance(decoded.journal, activity_types.JournalInput) and decoded == inp
