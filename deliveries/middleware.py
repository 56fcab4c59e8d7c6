"""The API answers in JSON even where django-ninja answers in text."""

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
