"""`[replicas]`: how the replicas of a service hear of each other and elect a leader."""

from __future__ import annotations

from dataclasses import dataclass

from services.shared.config.declare import option


@dataclass(frozen=True)
class ReplicaSettings:
    """Several replicas of a service: how they hear of each other."""

    heartbeat_s: float = option(
        2.0,
        "Every replica of every service says it is alive this often (`replica.heartbeat`).",
        min=0.05,
        max=60,
    )
    dead_after_s: float = option(
        6.0,
        "A replica not heard from for this long counts as gone (its work is taken over).",
        min=0.1,
        max=600,
    )
    lease_s: float = option(
        6.0,
        "Leader lease of the single-writer services (violations, jobs): the leader renews it "
        "every third of this; a standby takes over once it expired (PostgreSQL only).",
        min=0.3,
        max=600,
    )
