"""A protocol-faithful simulator of the upstream platforms (docs/architecture.md).

    handle = start_simulator(seed=7)        # background thread, free port
    handle.url("openai")                    # -> http://127.0.0.1:PORT/openai
    handle.script({"match": "pricing", "fault": "rate_limit", "times": 1})
    handle.stop()

`python manage.py simulator --port 8765` runs it in the foreground.
"""

from .core import Simulator, SimulatorHandle, make_server, start_simulator

__all__ = ["Simulator", "SimulatorHandle", "make_server", "start_simulator"]
