"""The example's URLs: the admin (its "pgtasks: Jobs" page lists the jobs)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
