"""The `AgentRun` workflow's input, read so that bad input fails the run, never its task.

The workflow takes its argument raw and decodes it here: input that is not
JSON (or no input at all) decoded by the SDK would fail the workflow *task*
("Failed decoding arguments"), which Temporal retries forever.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from agentor_temporal.workflows.carry import Carry
from agentor_temporal.workflows.conversation import Conversation
from agentor_temporal.workflows.run_ids import refuse_invalid_run_id
from agentor_temporal.workflows.types import AgentRunInput, parse_run_input

#: What `run` receives when a client starts the workflow with no argument.
NO_INPUT = RawValue(Payload())
#: An encrypted payload's encoding and key metadata (`agentor_temporal.codec`'s, which
#: workflow code does not import): a worker with no codec sees the payload so.
ENCRYPTED = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"


class EncryptedInput(RuntimeError):
    """The input is encrypted and this worker has no codec to read it.

    Not an `ApplicationError`: it fails the workflow *task*, which Temporal
    retries, so a worker with the run's key (or this one, given it) runs the
    run; failing the run would lose it to one worker's misconfiguration.
    """


def decoded(raw: RawValue) -> Any:
    """The workflow input as JSON values, or None when it cannot be read (never raises)."""
    if raw is NO_INPUT:
        return None
    try:
        return workflow.payload_converter().from_payload(raw.payload)
    except Exception:
        return None


def validated_input(raw: RawValue) -> AgentRunInput:
    """The validated input of this run.

    Raises:
        ApplicationError: non-retryable, `InvalidInput` naming the problem (the
            JSON problem last, when decoding failed), or `InvalidRunId`.
    """
    if raw is not NO_INPUT and raw.payload.metadata.get("encoding") == ENCRYPTED:
        key_id = raw.payload.metadata.get(KEY_ID_METADATA, b"?").decode(errors="replace")
        raise EncryptedInput(
            f"This run's input is encrypted with key {key_id!r}, and this worker has no "
            "encryption codec: build it with the keys (AGENTOR_ENCRYPTION_KEYS, "
            "--encryption-keys-file, or a client from agentor_temporal.connect(..., "
            "encryption_keys=...))"
        )
    try:
        value = None if raw is NO_INPUT else workflow.payload_converter().from_payload(raw.payload)
        inp = parse_run_input(value)
        if inp.carry is not None:
            Carry.from_dict(inp.carry)
        if inp.conversation is not None:
            Conversation.from_dict(inp.conversation)
    except Exception as exc:
        root: BaseException = exc
        while root.__cause__ is not None:
            root = root.__cause__  # a decoding error names the JSON problem last
        detail = str(exc) if root is exc else f"{exc} ({root})"
        raise ApplicationError(
            f"Invalid AgentRun input: {detail}", type="InvalidInput", non_retryable=True
        ) from None
    # the run id is a file name in every store and what resume() takes
    refuse_invalid_run_id(workflow.info().workflow_id)
    return inp
