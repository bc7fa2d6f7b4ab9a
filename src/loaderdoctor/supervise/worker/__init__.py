"""What runs inside a DataLoader worker process: the wrappers of the user's dataset, collate_fn
and worker_init_fn, the worker's context (built at its start, handed to its wrappers) and flight
recorder slot, its exception tags and sample policy. Nothing here imports the parent's machinery (``supervise.parent``): import-linter holds it.
"""
