"""Create keys this process reserved and has not sent yet.

A list's absence may reserve a key (docs/safety.md rule 1), so a runner someone else made shortly
before it can still be missed; its creation time is then too close to the key's to tell apart from
one our own create made. A create refused while its key had never gone out settles it: the key made
nothing, so the runner is not ours. Only this process knows what it has not sent, so the record
lives here and is lost at a restart (creation times decide then, as for any key).
"""

from __future__ import annotations


class UnsentKeys:
    """By resource UID, the create key this process reserved and has not sent, and those it sent.

    Keys are derived (the same resource, runner ID and recreation count give the same key), so a
    pass that read a stale status may reserve a key again after it went out: a sent key stays sent.
    A resource's record goes only when it is bound or gone from the watch, not when its finalizer is
    released: a pass on a stale copy of a released resource must still see that nothing went out.
    """

    def __init__(self) -> None:
        self._unsent: dict[str, str] = {}
        self._sent: dict[str, set[str]] = {}

    def reserved(self, uid: str, key: str) -> None:
        if key not in self._sent.get(uid, ()):
            self._unsent[uid] = key

    def holds(self, uid: str, key: object) -> bool:
        """`key` (the one in status) was reserved here and no create with it has gone out since."""
        return key is not None and self._unsent.get(uid) == key

    def sending(self, uid: str, key: str) -> None:
        """A create with `key` is going out: from now on it may have made a runner."""
        if self._unsent.get(uid) == key:
            del self._unsent[uid]
        self._sent.setdefault(uid, set()).add(key)

    def forget(self, uid: str) -> None:
        """The resource is bound (its keys no longer decide anything) or gone."""
        self._unsent.pop(uid, None)
        self._sent.pop(uid, None)

    def __len__(self) -> int:
        return len(self._unsent) + len(self._sent)
