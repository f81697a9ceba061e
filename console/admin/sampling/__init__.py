"""Operator console for sampling, one module per model family: brands, campaigns
(with plan preview and launch), runs (with progress, money and report), samples, and the
execution history. Shared widgets live in `console`, the tenant scope in `tenancy`."""

from django.contrib import admin

from . import brands, campaigns, history, runs, samples

admin.site.site_header = "GEO operator console"
admin.site.site_title = "GEO console"
admin.site.index_title = "Campaigns, runs and evidence"
# The console's tables (runs, samples) are wide; the app list is one click away in the header.
admin.site.enable_nav_sidebar = False

__all__ = ["brands", "campaigns", "history", "runs", "samples"]
