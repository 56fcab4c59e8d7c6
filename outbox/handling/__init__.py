"""The handling side: what a worker does with a message, exactly once in effect.

Dispatch (the inbox, the handler's transaction, retries and dead letters), the Dramatiq actors
bound per subscriber, ordering per stream, the rate limits, and the log context naming the
message in hand. It builds on the core; it never sends to the broker itself.
"""
