from django.db import models


class Ping(models.Model):
    """State changed together with the event that announces it."""

    n = models.IntegerField()

    def __str__(self):
        return f"ping {self.n}"


class Effect(models.Model):
    """One row per handler run: deliberately not idempotent, so a double effect shows."""

    subscriber = models.CharField(max_length=50)
    message_id = models.UUIDField()
    type = models.CharField(max_length=50)
    n = models.IntegerField()

    def __str__(self):
        return f"{self.subscriber} <- {self.type} {self.n}"


class Outage(models.Model):
    """While a subscriber has an outage row, its handlers fail (mode "outage"): an environment fault."""

    subscriber = models.CharField(max_length=50, unique=True)
