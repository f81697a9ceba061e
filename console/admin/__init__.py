"""Every page of the operator console, registered on the default admin site.

Presentation sits on top of the layers (docs/architecture.md): these modules call pipeline
and every domain through their services and selectors, and take every queryset from
console.scope; nothing below imports them.
"""

from . import analysis, billing, evidence, sampling, schedules

__all__ = ["analysis", "billing", "evidence", "sampling", "schedules"]
