from django.contrib import admin
from django_dramatiq.models import Task

# django_dramatiq's task table is filled only by its AdminMiddleware, which we leave out
# (a database write per task event); the dead letters and the timelines take its place.
admin.site.unregister(Task)
admin.site.site_header = "Drone delivery operations"
admin.site.site_title = "Drone delivery operations"
