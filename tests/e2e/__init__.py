"""End-to-end tests: the whole system as separate OS processes against real servers."""
