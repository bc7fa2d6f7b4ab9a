"""What torchdata's ``StatefulDataLoader`` needs beyond the supervision torch's DataLoader shares.

Imported only by ``supervise.stateful``, which needs torchdata (``torchdata_compat``).
"""
