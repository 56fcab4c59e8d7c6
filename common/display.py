"""How the project's admin pages show a link to another app's page and a place on the map."""

from django.contrib import admin
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html


def change_link(url_name: str, pk, label: str | None = None) -> str:
    """A link to another admin page by URL name and id: an app links to another's page without
    importing it (a URL name is no import), and shows plain text where that page is not installed."""
    if pk is None:
        return admin.site.empty_value_display
    text = label or str(pk)
    try:
        return format_html('<a href="{}" title="{}">{}</a>', reverse(url_name, args=[pk]), pk, text)
    except NoReverseMatch:
        return text


def coordinates(latitude: float | None, longitude: float | None, altitude: float | None = None) -> str:
    """A place as people read it (47.6300° N, 122.3500° W, 12 m), not as JSON or signed floats:
    four decimals are about 10 m, which is what an operator needs to find a vehicle."""
    if latitude is None or longitude is None:
        return admin.site.empty_value_display
    north, east = "N" if latitude >= 0 else "S", "E" if longitude >= 0 else "W"
    place = f"{abs(latitude):.4f}° {north}, {abs(longitude):.4f}° {east}"
    return place if altitude is None else f"{place}, {altitude:.0f} m"
