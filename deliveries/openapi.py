"""What the customer API's OpenAPI schema says beyond what ninja derives from the operations."""


def links_to_the_delivery() -> dict:
    """OpenAPI links: the accepted delivery's id feeds every operation on it, so clients and
    tools that follow links (schemathesis's stateful phase among them) can chain the calls."""
    operations = [
        "get_delivery",
        "get_status",
        "get_timeline",
        "reschedule_delivery",
        "cancel_delivery",
        "confirm_delivery",
    ]
    return {
        "responses": {
            202: {  # an int, as ninja keys the responses it derives: "202" beside it was a second 202
                "links": {
                    name: {
                        "operationId": f"deliveries_api_{name}",
                        "parameters": {"delivery_id": "$response.body#/deliveryId"},
                    }
                    for name in operations
                }
            }
        }
    }


# The timeline's second answer: ninja derives the JSON one from the response schema.
SVG_ANSWER = {"responses": {200: {"content": {"image/svg+xml": {"schema": {"type": "string"}}}}}}
