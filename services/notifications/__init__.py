"""One path for every message to a person (issue 20): `violations.notify`.

Its contract is `api.py` (the methods keep the wire names of the violations service, which runs
the path in its process and database: `serving.Notifications` is built by that service's
composition root).

A notification (user, kind, title, text, links, key) goes to the channels the user chose for its
kind (`preferences`): e-mail (their account's address, over SMTP: `delivery.smtp`), chat (their
own webhook: `delivery.webhook`) and the browser (event `notification.sent`, shown by the
gateway's live stream only to them). `notifier` dedupes by key, rate-limits per user and channel
(`limits`), delivers (`channels` builds the bodies) and records every outcome (`records`, over
`tables`). `producers` turn other services' events into notifications; `reminders` tells owners
before their reservations start and end. `delivery` is public: the violation handlers send
their e-mail and webhooks through it.
"""
