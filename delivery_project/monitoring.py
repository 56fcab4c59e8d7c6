"""Who may read `/metrics` and `/readyz`: anyone by default (they sit behind the load balancer,
beside the API), or only a scraper or probe holding MONITORING_TOKEN when it is set. `/healthz`
stays open: it says nothing but "alive".
"""

import functools
import hmac

from django.conf import settings
from django.http import JsonResponse


def monitoring_only(view):
    @functools.wraps(view)
    def guarded(request, *args, **kwargs):
        expected = settings.MONITORING_TOKEN.strip()  # as a secret file or an env line may leave it
        if expected:
            scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
            given = given.strip() if scheme.lower() == "bearer" else ""  # the scheme is case-insensitive (RFC 9110)
            if not hmac.compare_digest(given.encode(), expected.encode()):
                error = {"field": "Authorization", "message": "needs Authorization: Bearer <MONITORING_TOKEN>"}
                return JsonResponse({"detail": "not authenticated", "errors": [error]}, status=401)
        return view(request, *args, **kwargs)

    return guarded
