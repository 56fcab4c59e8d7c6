"""The core, which both sides share: the stores and what writes to them.

The envelope and the contracts (the published language), the catalogue, the registry of
subscriptions, `publish()` and the nudge it sends on commit (wake_up), the dead-letter store and
its reason codes, retention, the settings' defaults and the Dramatiq brokers the kernel runs on.
It imports only the models and observability.
"""
