"""The message bus: one interface, an AMQP (RabbitMQ) and an in-process implementation."""

from services.shared.bus.base import Bus, BusSettings, EventHandler, RpcHandler, Teardown

__all__ = ["Bus", "BusSettings", "EventHandler", "RpcHandler", "Teardown"]
