"""How a message reaches a person, public to the other services: SMTP (`smtp.SmtpSender`),
webhooks (`webhook.WebhookPoster`, signed as `signature` describes, bodies within the chat
services' limits by `text`), what each delivery did (`outcome.ActionOutcome`), and which
e-mail server and chat webhooks are in force (`setup`: the Settings page's, else the file's).

The violations service's e-mail and webhook handlers (`services.violations.actions`) send
through these as the notifications' own channels do.
"""
