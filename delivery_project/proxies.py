"""Who the client is behind the proxies in front of the web processes."""

from django.conf import settings


def client_address(request) -> str:
    """REMOTE_ADDR; behind DJANGO_PROXY_COUNT trusted proxies, the address the outermost of them
    saw, read from X-Forwarded-For counted from the right, where a client cannot forge it.
    (The admin-login lockout records failures with this address.)"""
    if settings.PROXY_COUNT:
        hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
        if len(hops) >= settings.PROXY_COUNT:
            return hops[-settings.PROXY_COUNT]
    return request.META.get("REMOTE_ADDR", "")
