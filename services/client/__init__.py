"""The `warden` command-line client of the REST API: login, status, reservations, jobs,
violations (`commands.py`), over a small HTTP client (`api.py`) with the credentials stored
under the user's config folder (`store.py`)."""
