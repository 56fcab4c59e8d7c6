"""The relay side: committed rows to the broker, and the repair of losses.

The relay loop and its publishers (pipelined confirms), the leases that share rows between
relays, the heartbeats of relays and workers, the redelivery sweep, the letters the broker set
aside, and the bookkeeping of queues that are down. It builds on the core; it never calls a
handler.
"""
