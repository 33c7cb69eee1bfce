"""Accounts: users, groups, sessions, passwords, LDAP sign-in, SSH self-signup, the first
run's set-up tokens, calendar-feed tokens and the counted attempts of rate limits. They run inside
the reservations service's process and database; other code calls them through `api.py`."""
