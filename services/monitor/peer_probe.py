"""Monitor replicas that died, found before their heartbeat expires.

A replica that is killed (kill -9, a crash of the process) closes its connection to RabbitMQ at
once, and the broker deletes its own RPC queue (`monitor-r<id>`, auto-deleted with its last
consumer) at once too. So once a peer's heartbeat is late (over `LATE_AFTER` heartbeats), this
replica asks the broker for that queue: gone, or left with no consumer, the peer is dead, and
its hosts are taken over now instead of after `[replicas] dead_after_s`. A peer whose machine
vanished (no TCP close) keeps its queue until the broker's own heartbeat gives up: it is counted
gone after `dead_after_s`, as before. A peer that was alive after all (its queue gone while the
broker restarted) is heard again at its next heartbeat and gets its hosts back.
"""

from __future__ import annotations

import time

from services.shared.bus import Bus
from services.shared.bus.amqp import rpc_queue_name
from services.shared.cluster.replicas import Replicas

SERVICE = "monitor"
# Heartbeats: a little over one, so that only a peer really late costs a question to the broker.
LATE_AFTER = 1.1


async def vanished(bus: Bus, replicas: Replicas, own_rpc: str) -> list[str]:
    """The peers whose heartbeat is late and whose RPC queue (`details.rpc`) the broker no
    longer has, or has with no consumer; none when the bus cannot tell (it does not know this
    replica's own queue either)."""
    now = time.monotonic()
    late = {
        peer.replica: rpc_queue_name(str(peer.details["rpc"]))
        for peer in replicas.live(SERVICE)
        if peer.replica != replicas.replica_id
        and now - peer.heard_at > LATE_AFTER * replicas.heartbeat_s
        and isinstance(peer.details.get("rpc"), str)
    }
    if not late:
        return []
    own = rpc_queue_name(own_rpc)
    found = await bus.queue_depths([own, *late.values()])
    if own not in found:  # this bus cannot tell: wait for the heartbeats to expire
        return []

    def dead(queue: str) -> bool:
        depth = found.get(queue)
        return depth is None or depth[1] == 0  # (a consumer count it cannot tell: alive)

    return [replica for replica, queue in late.items() if dead(queue)]
