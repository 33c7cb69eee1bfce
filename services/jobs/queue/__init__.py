"""The jobs queue's pass, pure: what it reads and answers (`model.py`), where a job's tasks fit
(`placement.py`), and the pass itself (`scheduler.py`: state in, decisions out)."""
