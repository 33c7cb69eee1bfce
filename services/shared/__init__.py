"""What every service shares: contracts, bus, config, database, logging, runtime."""
