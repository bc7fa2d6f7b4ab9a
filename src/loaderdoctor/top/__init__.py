"""``loaderdoctor top``: a read-only look at the loaders of a job running under ``loaderdoctor run``.

``attach`` finds the job and reads its processes' flight-recorder tables from outside
(``model`` holds what it returns); the job is never written to.
"""
