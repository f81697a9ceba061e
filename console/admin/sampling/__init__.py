"""Operator console for sampling, one module per model family: brands, campaigns
(with plan preview and launch), runs (with progress, money and report), samples, and the
execution history. Shared widgets live in `console`, the tenant scope in `tenancy`."""

from django.contrib import admin

from . import brands, campaigns, history, runs, samples

# The header and the home page's title say the reader's role (console/templatetags/console.py,
# templates/admin/base_site.html); these are what a page without a reader shows.
admin.site.site_header = "GEO console"
admin.site.site_title = "GEO console"
admin.site.index_title = "Home"
# The console's tables (runs, samples) are wide; the app list is one click away in the header.
admin.site.enable_nav_sidebar = False

__all__ = ["brands", "campaigns", "history", "runs", "samples"]
