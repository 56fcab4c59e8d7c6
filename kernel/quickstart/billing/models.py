from django.db import models


class Invoice(models.Model):
    order_id = models.BigIntegerField()  # another app's id: a value, never a foreign key

    def __str__(self):
        return f"invoice of order {self.order_id}"
