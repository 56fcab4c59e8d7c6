# Tokens move from one per customer to a table of their own (rotation, revocation, expiry).
# Each existing customer's token is kept, working as before; its prefix is unknown, since only
# its hash was ever stored.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


def keep_existing_tokens(apps, schema_editor):
    Customer = apps.get_model("deliveries", "Customer")
    CustomerToken = apps.get_model("deliveries", "CustomerToken")
    CustomerToken.objects.bulk_create(
        CustomerToken(customer_id=c.id, token_hash=c.token_hash, prefix="?", created_at=c.created_at)
        for c in Customer.objects.all()
    )


def restore_one_token_each(apps, schema_editor):
    """Back to one token each: the newest still valid, or none that works."""
    from django.db.models import Q
    from django.utils import timezone

    Customer = apps.get_model("deliveries", "Customer")
    valid = Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
    for customer in Customer.objects.all():
        token = customer.tokens.filter(valid).order_by("-created_at").first()
        customer.token_hash = token.token_hash if token else f"none-valid-{customer.id.hex}"
        customer.save(update_fields=["token_hash"])


class Migration(migrations.Migration):

    dependencies = [
        ('deliveries', '0004_operator_permissions'),
    ]

    operations = [
        migrations.CreateModel(
            name='CustomerToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('token_hash', models.CharField(max_length=64, unique=True)),
                ('prefix', models.CharField(help_text="The token's first characters, to tell tokens apart.", max_length=8)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('customer', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tokens', to='deliveries.customer')),
            ],
        ),
        # Nullable before the data moves, so that going back re-adds the column empty, fills it,
        # and only then makes it NOT NULL again.
        migrations.AlterField(
            model_name='customer',
            name='token_hash',
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.RunPython(keep_existing_tokens, restore_one_token_each),
        migrations.RemoveField(
            model_name='customer',
            name='token_hash',
        ),
    ]
