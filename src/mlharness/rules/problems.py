"""A problem found by a rule: what is wrong, what it means, and the command that fixes it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One finding. ``code`` is stable (tests and scripts match on it); the rest is for people."""

    code: str
    message: str
    meaning: str = ""
    fix: str = ""
    where: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        head = f"{self.where}: {self.message}" if self.where else self.message
        return head
