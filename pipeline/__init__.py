"""Orchestration on top of the domains: step execution, Celery tasks, the run lifecycle
(launch with its money hold, finish, settle, cancel), dispatch and the whole-system auditor.

The only package that calls across domains; see docs/architecture.md for the layers.
"""
