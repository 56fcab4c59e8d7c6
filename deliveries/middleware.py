"""The API answers in JSON even where django-ninja answers in text, and reads a chunked body."""

from django.conf import settings
from django.http import JsonResponse


def json_method_not_allowed(get_response):
    """django-ninja answers a method a path does not serve with a text/html 405; the API's
    clients get the documented JSON error shape, with the Allow header kept."""

    def middleware(request):
        response = get_response(request)
        if response.status_code == 405 and request.path.startswith("/api/") and "Allow" in response:
            allowed = response["Allow"]
            json_response = JsonResponse(
                {
                    "detail": f"{request.method} is not allowed on {request.path}; use {allowed}",
                    "errors": [{"field": "method", "message": f"allowed: {allowed}"}],
                },
                status=405,
            )
            json_response["Allow"] = allowed
            return json_response
        return response

    return middleware


def chunked_bodies(get_response):
    """A body sent with `Transfer-Encoding: chunked` has no Content-Length, and Django reads such a
    body as empty: a valid request was refused as `body: Field required`. Under gunicorn, which
    decodes the chunks and ends the stream (`wsgi.input_terminated`), the body is read here, within
    DATA_UPLOAD_MAX_MEMORY_SIZE; a server that cannot (runserver) answers 411 naming Content-Length."""

    def middleware(request):
        meta = request.META
        if "chunked" not in meta.get("HTTP_TRANSFER_ENCODING", "").lower() or meta.get("CONTENT_LENGTH"):
            return get_response(request)
        if not meta.get("wsgi.input_terminated"):
            return _refused(411, "send a Content-Length: this server cannot read a chunked body", "Content-Length")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = meta["wsgi.input"].read(limit + 1)
        if len(body) > limit:
            return _refused(413, f"the body is over {limit:,} bytes", "body")
        request._body, meta["CONTENT_LENGTH"] = body, str(len(body))
        return get_response(request)

    return middleware


def _refused(status: int, detail: str, field: str) -> JsonResponse:
    return JsonResponse({"detail": detail, "errors": [{"field": field, "message": detail}]}, status=status)
