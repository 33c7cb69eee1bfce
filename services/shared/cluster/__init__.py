"""Several replicas and their background work: heartbeats, the leader lease, the live host list,
stopping a loop."""
