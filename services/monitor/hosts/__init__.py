"""The monitor's host inventory: which hosts it watches (`inventory.py`, pure), their rows
(`host_store.py`), adding, editing, removing and checking them (`hosts_admin.py`), a host's key
and GPUs checked (`host_check.py`), and SSH self-signup's proof of a login (`login_proof.py`)."""
