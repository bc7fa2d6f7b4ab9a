"""What torchdata's ``StatefulDataLoader`` needs beyond the supervision torch's DataLoader shares:
where its streams go on, how a stopped pool resumes, why one runs plain.

Imported only by ``supervise.stateful``, which needs torchdata (``torchdata_compat``).
"""
