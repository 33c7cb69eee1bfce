"""The message bus: one interface, an AMQP (RabbitMQ) and an in-process implementation."""

from services.shared.bus.base import (
    RPC_DELIVERY,
    Bus,
    BusSettings,
    EventHandler,
    RpcDelivery,
    RpcHandler,
    Teardown,
)

__all__ = [
    "RPC_DELIVERY",
    "Bus",
    "BusSettings",
    "EventHandler",
    "RpcDelivery",
    "RpcHandler",
    "Teardown",
]
