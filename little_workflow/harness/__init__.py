"""Harness: the agent harness, its context, model slots, tools and sessions (Layer C).

Work in progress: ``models`` (the conversation model and the providers) lands first.
"""

from __future__ import annotations

__all__: list[str] = []
