"""Small helpers for the words of messages and reports."""

from __future__ import annotations

from enum import Enum


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 update``, ``2 updates``; ``nouns`` where the plural is not ``noun + "s"``."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


class Word(str, Enum):
    """A fixed choice that is a word of result.json and the reports (a status, a kind): a ``str``
    whose ``str()`` and format are its value, so that it is written as that word everywhere."""

    def __str__(self) -> str:
        return str(self.value)
