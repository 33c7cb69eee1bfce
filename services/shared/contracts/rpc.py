"""RPC names: methods are verbs named `<service>.<method>`; every service answers `health`."""

from __future__ import annotations

HEALTH_METHOD = "health"
