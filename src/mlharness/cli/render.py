"""Shared terminal rendering: consoles, progress bars, result tables."""

from __future__ import annotations

from rich.console import Console

console = Console()
console_err = Console(stderr=True)
