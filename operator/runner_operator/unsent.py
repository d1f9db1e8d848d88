"""Create keys this process reserved and has not sent yet.

A list's absence may reserve a key (docs/safety.md rule 1), so a runner someone else made shortly
before it can still be missed; its creation time is then too close to the key's to tell apart from
one our own create made. A create refused while its key had never gone out settles it: the key made
nothing, so the runner is not ours. Only this process knows what it has not sent, so the record
lives here and is lost at a restart (creation times decide then, as for any key).
"""

from __future__ import annotations


class UnsentKeys:
    """By resource UID, the create key this process reserved and has not sent."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}

    def reserved(self, uid: str, key: str) -> None:
        self._keys[uid] = key

    def holds(self, uid: str, key: object) -> bool:
        """`key` (the one in status) was reserved here and no create with it has gone out since."""
        return key is not None and self._keys.get(uid) == key

    def sending(self, uid: str) -> None:
        """A create with the key is going out: from now on it may have made a runner."""
        self._keys.pop(uid, None)

    forget = sending
    """The resource is gone (its finalizer released): nothing to remember."""

    def __len__(self) -> int:
        return len(self._keys)
