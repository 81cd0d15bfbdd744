"""Small helpers for the words of messages and reports."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 update``, ``2 updates``; ``nouns`` where the plural is not ``noun + "s"``."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
