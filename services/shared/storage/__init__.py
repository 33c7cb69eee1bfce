"""A service's database: engines and migrations, transactions, the SQLite driver, the outbox."""
