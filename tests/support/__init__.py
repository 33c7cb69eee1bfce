"""Test set-up written once (see README.md in this folder)."""
