"""Every page of the operator console, registered on the default admin site.

Presentation sits on top of the layers (docs/architecture.md): these modules call pipeline
and every domain (the API's webhook endpoints included) through their services and
selectors, and take every queryset from tenancy.scope; nothing below imports them.
"""

from . import alerts, analysis, api, billing, evidence, sampling, schedules, tenancy

__all__ = ["alerts", "analysis", "api", "billing", "evidence", "sampling", "schedules", "tenancy"]
