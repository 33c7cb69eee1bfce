"""What the violations service answers: its RPC methods (beside `health`) and event handlers.

The service's issue fills these tables; the runtime serves them as they are.
"""

from services.shared.bus import EventHandler, RpcHandler

RPC_METHODS: dict[str, RpcHandler] = {}

# (source service, routing pattern, handler name) -> handler
EVENT_HANDLERS: dict[tuple[str, str, str], EventHandler] = {}
