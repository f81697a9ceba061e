from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    """The protocol-faithful fake of the upstream platforms. An app only to own the
    `simulator` command; production code never imports it (pyproject.toml, import-linter)."""

    name = "simulator"
