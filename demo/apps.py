from django.apps import AppConfig


class DemoConfig(AppConfig):
    """`manage.py demo`: the product run end to end against the simulator. An app of its own
    (not pipeline's) because it starts the simulator, which production code never imports."""

    name = "demo"
