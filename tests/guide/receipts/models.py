from django.db import models


class Receipt(models.Model):
    """What a customer is sent once a delivery is completed: one per delivery."""

    delivery_id = models.UUIDField(unique=True)  # another context's id: a value, never a foreign key
    number = models.CharField(max_length=20, unique=True)
    issued_at = models.DateTimeField(auto_now_add=True)
