"""Simulated platform protocols, one module each, registered by platform key.

Adding a platform: write `platforms/<name>.py` with a `PlatformProtocol` subclass and add one
line here. The simulator then serves it under `/<platform key>/<the platform's real path>`.
"""

from __future__ import annotations

import importlib

from ..protocol import PlatformProtocol

# platform key -> "module:Class" (modules are imported on first use)
PROTOCOLS: dict[str, str] = {
    "openai": "connectors.simulator.platforms.openai_responses:OpenAIResponsesProtocol",
    "collector": "connectors.simulator.platforms.collector:CollectorProtocol",
    "openai_chat": "connectors.simulator.platforms.openai_chat:OpenAIChatProtocol",
    "deepseek": "connectors.simulator.platforms.deepseek:DeepSeekProtocol",
    "kimi": "connectors.simulator.platforms.kimi:KimiProtocol",
    "anthropic": "connectors.simulator.platforms.anthropic:AnthropicProtocol",
    "gemini": "connectors.simulator.platforms.gemini:GeminiProtocol",
    "perplexity": "connectors.simulator.platforms.perplexity:PerplexityProtocol",
    "doubao": "connectors.simulator.platforms.doubao:DoubaoProtocol",
    "qwen": "connectors.simulator.platforms.qwen:QwenProtocol",
    "ollama": "connectors.simulator.platforms.ollama:OllamaProtocol",
}


def protocol_class(platform: str) -> type[PlatformProtocol]:
    module_name, class_name = PROTOCOLS[platform].split(":")
    cls: type[PlatformProtocol] = getattr(importlib.import_module(module_name), class_name)
    return cls
