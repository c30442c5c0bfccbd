"""Call ids as models use them: which use of its id a tool call is, and the key naming it.

A model's call id does not identify a call: models reuse `call_0` in every
turn, and some send one id twice in a turn. So a call is known by its id and
by which use of that id in the run it is. The run counts the uses of each id
in the order the model asked (deterministically, from its own turns), carries
the counts over continue-as-new, and names each use by a key: the first use
of an id keeps the id itself (so idempotency keys and decisions recorded
before uses were counted, and calls in flight across an upgrade, keep theirs);
later uses are `<id>#<n>`. An id that itself contains `#` is numbered from
its first use, so no two uses of any ids ever share a key.

The counts are kept for the whole run (a later call may reuse any id), so an
id longer than `policies.LONG_CALL_ID_CHARS` is counted under a digest of it
(`count_key`): a model's 40 KB ids, counted whole, made the counts a run
carries over continue-as-new pass Temporal's 2 MB limit within a few turns.
The digest names only the count; keys and idempotency keys are made from the
id itself, with the same use numbers.

Counted one by one, a run's ids still grow what it carries by ~35 bytes each
(a model's unique `call_<24 characters>`): 500 calls a turn passed the
1.9 MB a run hands on near turn 100. So past `policies.CARRIED_USES_BYTES`
the ids used once are kept in a fixed-size Bloom filter (`SeenIds`) and only
reused ids are counted (`CallUses.compacted`). The filter never forgets an
id, so a reused id's key is never an earlier call's; it may take an id for
seen that was not (rarely: one in 1,000 at 50,000 ids), and that id's first
call is then keyed `<id>#2`, still a key of its own.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

from agentor_temporal.workflows import policies
from agentor_temporal.workflows.payloads import encoded_size
from agentor_temporal.workflows.policies import LONG_CALL_ID_CHARS


def count_key(call_id: str) -> str:
    """What an id is counted under: itself, or a digest of a long one (`#` and 32 hex digits)."""
    if len(call_id) <= LONG_CALL_ID_CHARS:
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"#{digest[:32]}"


def use_key(call_id: str, use: int = 1) -> str:
    """The key of the `use`-th call with this id in a run (1: its first)."""
    if use <= 1 and "#" not in call_id:
        return call_id
    return f"{call_id}#{max(use, 1)}"


def parse_key(key: str) -> tuple[str, int]:
    """(call id, use) of a key made by `use_key`; a plain id is its own first use."""
    head, mark, tail = key.rpartition("#")
    if mark and tail.isdigit():
        return head, int(tail)
    return key, 1


class SeenIds:
    """Call ids used (at least) once: a Bloom filter of `policies.CALL_IDS_SEEN_BITS` bits.

    Args:
        data: the filter as `encode` wrote it; None: empty.

    Raises:
        ValueError: when `data` is not such a filter.
    """

    def __init__(self, data: str | None = None) -> None:
        size = policies.CALL_IDS_SEEN_BITS // 8
        if data is None:
            self.bits = bytearray(size)
            return
        try:
            bits = base64.b64decode(data.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise ValueError("the call ids seen are not base64") from None
        if len(bits) != size:
            raise ValueError(f"the call ids seen take {len(bits)} bytes, not {size}")
        self.bits = bytearray(bits)

    @staticmethod
    def _positions(key: str) -> list[int]:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        bits = policies.CALL_IDS_SEEN_BITS
        return [
            int.from_bytes(digest[4 * i : 4 * i + 4], "big") % bits
            for i in range(policies.CALL_IDS_SEEN_HASHES)
        ]

    def add(self, key: str) -> None:
        """Note a `count_key` as used."""
        for bit in self._positions(key):
            self.bits[bit >> 3] |= 1 << (bit & 7)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and all(
            self.bits[bit >> 3] & (1 << (bit & 7)) for bit in self._positions(key)
        )

    def copy(self) -> SeenIds:
        """An independent copy."""
        seen = SeenIds()
        seen.bits[:] = self.bits
        return seen

    def encode(self) -> str:
        """The filter as text (`Carry.seen`, `AgentRunInput.call_seen`)."""
        return base64.b64encode(bytes(self.bits)).decode("ascii")


class CallUses:
    """How many calls of a run used each call id so far.

    Args:
        counts: carried counts (`count_key` or a whole id -> calls).
        seen: carried `SeenIds.encode`: ids used once, not in `counts`.
    """

    def __init__(self, counts: dict[str, int] | None = None, seen: str | None = None) -> None:
        #: `count_key(call id)` -> calls that used it
        self.counts: dict[str, int] = {}
        #: ids used once that `counts` no longer names (see `compacted`)
        self.seen = SeenIds(seen) if seen is not None else None
        # counts carried by builds that kept long ids whole
        for call_id, uses in (counts or {}).items():
            self.at_least(call_id, uses)

    def next(self, call_id: str) -> int:
        """Count one more call with this id; return which use it is."""
        key = count_key(call_id)
        use = self.counts.get(key, 0)
        if not use and self.seen is not None and key in self.seen:
            use = 1
        self.counts[key] = use + 1
        return use + 1

    def compacted(self) -> tuple[dict[str, int], str | None]:
        """(counts, seen) to carry: past CARRIED_USES_BYTES the ids used once go in `seen`."""
        if self.seen is None and encoded_size(self.counts) <= policies.CARRIED_USES_BYTES:
            return dict(self.counts), None
        seen = self.seen.copy() if self.seen is not None else SeenIds()
        counts: dict[str, int] = {}
        for key, uses in self.counts.items():
            if uses == 1:
                seen.add(key)
            else:
                counts[key] = uses
        return counts, seen.encode()

    def at_least(self, call_id: str, uses: int) -> None:
        """Record that the id (or the `count_key` of one) was used at least `uses` times."""
        key = count_key(call_id)
        if uses > self.counts.get(key, 0):
            self.counts[key] = uses

    def seed_keys(self, keys: Iterable[str]) -> None:
        """Count the uses that keys name (decisions carried from a build that kept no counts)."""
        for key in keys:
            self.at_least(*parse_key(key))

    def seed_messages(self, messages: Iterable[dict[str, Any]]) -> None:
        """Count the calls of a conversation a segment opens with (a resumed run's)."""
        for message in messages:
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            calls = message.get("tool_calls")
            if not isinstance(calls, list):
                continue  # no calls a run reads (the run's start refuses such input)
            for call in calls:
                if isinstance(call, dict) and call.get("id") is not None:
                    self.next(str(call["id"]))
