"""What runs in the training (parent) process: the supervised iterators, ``Recovery``, the worker
``Pool`` and its ``WorkerWatch``, the ledger, the result queue, the quarantine, incidents and the
``Supervision`` a loader's iterators share. It builds the worker side's wrappers (``supervise.worker``)
and reads what workers leave behind; the worker side never imports it.
"""
