"""The agent of the long-run benchmark: one tool whose result has a chosen size.

`read_chunk(n)` answers with `LONG_RUN_RESULT_BYTES` bytes of text (default
10,000) and appends `<run_id> <call_id>` to the ledger file named by
`LONG_RUN_LEDGER`, so the benchmark can check that every call ran once.
The text varies with `n` but compresses well, like source files do.
"""

from __future__ import annotations

import os

from agentor_temporal import Agentor, function_tool
from agentor_temporal.activities import tool_context

#: One line of the text a tool returns (repeated and numbered to the size asked).
_LINE = "def handler(request):  # the quick brown fox jumps over the lazy dog\n"


def chunk_text(n: int, size: int) -> str:
    """`size` bytes of text that differ for each `n`."""
    head = f"# chunk {n}\n"
    body = (_LINE * (size // len(_LINE) + 1))[: max(size - len(head), 0)]
    return head + body


@function_tool
def read_chunk(n: int) -> str:
    """Read chunk `n` of the repository being worked on.

    Args:
        n: Which chunk to read.
    """
    ledger = os.environ.get("LONG_RUN_LEDGER")
    if ledger:
        ctx = tool_context()
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(f"{ctx.run_id} {ctx.call_id}\n")
    return chunk_text(n, int(os.environ.get("LONG_RUN_RESULT_BYTES", "10000")))


coder = Agentor(
    name="Long Coder",
    model="gpt-4o-mini",
    instructions="You are a coding agent working through a large repository.",
    tools=[read_chunk],
    embedded_worker=False,
)
