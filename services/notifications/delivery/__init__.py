"""How a message reaches a person, public to the other services: SMTP (`smtp.SmtpSender`),
webhooks (`webhook.WebhookPoster`, signed as `signature` describes, bodies within the chat
services' limits by `text`), and what each delivery did (`outcome.ActionOutcome`).

The violations service's e-mail and webhook handlers (`services.violations.actions`) send
through these as the notifications' own channels do.
"""
