"""Driving the admin as an operator does."""

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME


def act(client, model: str, action: str, ids, **extra):
    return client.post(f"/admin/{model}/", {"action": action, ACTION_CHECKBOX_NAME: [str(i) for i in ids], **extra})
