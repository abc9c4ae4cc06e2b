"""What the service returns: records the CLI and the MCP server render in their own (camelCase) shapes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunReport:
    """What an ingest or sync did; counts add up to what it saw."""

    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    refreshed: int = 0
    deleted: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    seconds: float = 0.0
    started_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "added": self.added, "updated": self.updated,
                "unchanged": self.unchanged, "refreshed": self.refreshed, "deleted": self.deleted,
                "skippedCount": len(self.skipped), "failedCount": len(self.failed),
                "skipped": self.skipped, "failed": self.failed, "chunks": self.chunks,
                "chunksEmbedded": self.embedded, "chunksReused": self.reused,
                "seconds": round(self.seconds, 3), "startedAt": self.started_at}

