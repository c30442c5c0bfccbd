"""The chaos soak's person: approves or denies every waiting call, from its own process.

    python bench/soak_approver.py ADDRESS DECISIONS_FILE

Decides by the call id (a stable hash: even approves, odd denies), appends
`<run_id> <call_id> approve|deny` to DECISIONS_FILE once the run took the
decision, and keeps going through server restarts until killed.
"""

from __future__ import annotations

import asyncio
import sys
import zlib

from temporalio.client import Client

from agentor_temporal._runs import send_decision, waiting_calls
from agentor_temporal.workflows.types import Decision


async def main(address: str, decisions: str) -> None:
    client = None
    while True:
        try:
            if client is None:
                client = await Client.connect(address)
            for row in await waiting_calls(client, agent="Soak Agent"):
                approved = zlib.crc32(row.call_id.encode()) % 2 == 0
                try:
                    await send_decision(
                        client, row.run_id, Decision(row.call_id, approved, by="soak")
                    )
                except (KeyError, ValueError):
                    continue  # decided already, or the run moved on
                with open(decisions, "a", encoding="utf-8") as f:
                    f.write(f"{row.run_id} {row.call_id} {'approve' if approved else 'deny'}\n")
        except Exception as exc:  # the server restarting: try again shortly
            print(f"approver: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
