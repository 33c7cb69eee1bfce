"""The built-in violation handlers: what each does for one escalation step of an incident.

Each is pure of the bus: the service's consumers (one durable queue per handler) turn a
`violation.escalated` event into an `Alert`, call the handler and record its outcomes on the
incident's timeline.
"""
