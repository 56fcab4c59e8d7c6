"""A package travels on one delivery at a time: refuse a second active delivery of one package id."""

from django.db import migrations, models
from django.db.models import Count

ENDED = ["delivered", "failed", "cancelled"]


def refuse_if_a_package_travels_twice(apps, schema_editor):
    """The index cannot be built over duplicates, and which of two deliveries is the mistake is the
    operator's call: name them instead of failing with the database's message."""
    Delivery = apps.get_model("deliveries", "Delivery")
    twice = (
        Delivery.objects.exclude(status__in=ENDED)
        .values("customer_id", "package_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    if twice.exists():
        listed = ", ".join(f"customer {t['customer_id']} package {t['package_id']}" for t in twice[:10])
        raise RuntimeError(
            f"{twice.count()} packages are on more than one delivery that has not ended ({listed}); "
            "cancel the extra deliveries, then migrate again"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("deliveries", "0008_idempotency_fingerprint"),
    ]

    operations = [
        migrations.RunPython(refuse_if_a_package_travels_twice, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="delivery",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ENDED), _negated=True),
                fields=("customer", "package_id"),
                name="delivery_package_travels_once",
            ),
        ),
    ]
