"""A run's conversation by reference: a base already in history, plus a tail.

Sending the whole conversation with every `generate` call copies it into
history once per turn, so history grows with the square of the turns and a
long run hits Temporal's limits. Past a small size (`AgentSpec.inline_bytes`)
a request instead names its base, the request of an earlier `generation` (or
the messages of a `run_start`) by its whole-run event position, and carries
only the messages added since. The worker that runs the model call rebuilds
the full request from its cache of the run's conversation, or, on a miss,
from the run's own history (`TemporalStore`), which holds every base. Each
base carries a chain digest, so a cache entry is used only for the exact
conversation the workflow means. History then grows by one turn's messages
per turn, and the workflow holds only the tail in memory.

Why not external payload storage: it keeps big payloads out of history, but
the same transcript would still be stored again every turn (outside history),
the store must outlive every replay that may need it, and every deployment
would need a shared bucket. The run's history already holds each message
once; references only point at it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from agentor_temporal.store.events import json_copy
from agentor_temporal.workflows.payloads import encoded_size


def canonical(value: Any) -> bytes:
    """The bytes a digest is taken over (key order and spacing fixed).

    `surrogatepass`: a lone surrogate (a file name decoded with
    surrogateescape, in a tool result) must not fail the workflow task that
    takes a digest; no history has such a digest, since it used to raise.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode("utf-8", "surrogatepass")


def chain_digest(base: str, tail: list[dict[str, Any]], encoded: bytes | None = None) -> str:
    """The digest of `base`'s conversation followed by `tail` ("" for no base).

    `encoded` is `canonical(tail)` when the caller has it already.
    """
    h = hashlib.sha256(base.encode())
    h.update(b"\x00")
    h.update(canonical(tail) if encoded is None else encoded)
    return h.hexdigest()


@dataclass
class ConversationRef:
    """Names the messages of an event in the run's history."""

    #: whole-run position of the `generation` (its request) or `run_start`
    position: int
    #: how many messages that is
    count: int
    #: `chain_digest` of those messages
    digest: str
    #: their encoded size in bytes
    size: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (activity input, workflow input)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ConversationRef:
        """Read the JSON form.

        Raises:
            ValueError: when it is not a reference.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a conversation reference is an object, got {type(data).__name__}")
        try:
            return cls(
                position=int(data["position"]),
                count=int(data["count"]),
                digest=str(data["digest"]),
                size=int(data.get("size") or 0),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed conversation reference {data!r}: {exc}") from None


class Conversation:
    """The messages the workflow sends next, held inline or as base + tail.

    Args:
        messages: the messages after `base` (all of them when `base` is None).
        base: where the rest of the conversation is in history.
    """

    def __init__(self, messages: list[dict[str, Any]], base: ConversationRef | None = None):
        self.base = base
        self.tail = messages
        self._sizes = [encoded_size(m) for m in messages]
        #: (position, count) of the last request (or run_start) recorded inline
        self._anchor: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        """Encoded bytes of the whole conversation (what the model receives)."""
        return (self.base.size if self.base else 0) + sum(self._sizes)

    @property
    def by_reference(self) -> bool:
        """Whether requests name a base instead of carrying every message."""
        return self.base is not None

    def append(self, message: dict[str, Any]) -> None:
        """Add a message at the end."""
        self.tail.append(message)
        self._sizes.append(encoded_size(message))

    def extend(self, messages: list[dict[str, Any]]) -> None:
        """Add messages at the end."""
        for message in messages:
            self.append(message)

    def request(self) -> list[dict[str, Any]]:
        """The messages a request carries (a copy): all of them, or the tail."""
        copied: list[dict[str, Any]] = json_copy(self.tail)
        return copied

    def recorded(self, position: int) -> None:
        """The current messages were recorded whole at `position` (a request or run_start).

        By reference, they become the new base; inline, they are remembered
        as the base to switch to later.
        """
        if self.base is None:
            self._anchor = (position, len(self.tail))
            return
        self.base = ConversationRef(
            position=position,
            count=self.base.count + len(self.tail),
            digest=chain_digest(self.base.digest, self.tail),
            size=self.base.size + sum(self._sizes),
        )
        self.tail, self._sizes = [], []

    def switch(self) -> bool:
        """Start sending by reference, from the last messages recorded whole.

        Returns whether it switched (False inline with nothing recorded yet).
        """
        if self.base is not None:
            return True
        if self._anchor is None:
            return False
        position, count = self._anchor
        self.base = ConversationRef(
            position=position,
            count=count,
            digest=chain_digest("", self.tail[:count]),
            size=sum(self._sizes[:count]),
        )
        self.tail, self._sizes = self.tail[count:], self._sizes[count:]
        return True

    def to_dict(self) -> dict[str, Any]:
        """The carried form (continue-as-new input); requires `by_reference`."""
        assert self.base is not None
        return {"base": self.base.to_dict(), "tail": self.request()}

    @classmethod
    def from_dict(cls, data: Any) -> Conversation:
        """Read the carried form.

        Raises:
            ValueError: when it is malformed.
        """
        if not isinstance(data, dict) or not isinstance(data.get("tail"), list):
            raise ValueError("a carried conversation is {'base': {...}, 'tail': [...]}")
        return cls(list(data["tail"]), ConversationRef.from_dict(data.get("base")))
