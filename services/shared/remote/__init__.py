"""Commands on hosts: what a command is, with no SSH in it (`shell.py`, pure), and the SSH layer
that runs them (`ssh.py`)."""
