"""Test set-up written once: free ports, waiting on a condition, config files, the simulated
fleet over SSH, the end-to-end system, a throwaway Unix user, a real sshd (see README.md)."""
