"""One path for every message to a person (issue 20): `violations.notify`.

A notification (user, kind, title, text, links, key) goes to the channels the user chose for its
kind (`preferences`): e-mail (their account's address, over the violation handlers' SMTP path),
chat (their own webhook, over the violation handlers' webhook path) and the browser (event
`notification.sent`, shown by the gateway's live stream only to them). `notifier` dedupes by
key, rate-limits per user and channel (`limits`), delivers (`channels`) and records every
outcome (`records`). `producers` turn other services' events into notifications; `reminders`
tells owners before their reservations start and end.
"""
