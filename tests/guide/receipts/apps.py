from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    """Receipts: one for every delivery completed, announced as `receipt.issued`."""

    name = "tests.guide.receipts"
    label = "receipts"
    default_auto_field = "django.db.models.BigAutoField"
