"""Orchestration on top of the domains (docs/architecture.md)."""
