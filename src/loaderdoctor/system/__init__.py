"""Reading the machine: pure probes (no torch, no printing) that return dataclasses.

Every probe returns its dataclass even when a source cannot be read: the values are ``None`` and
``note`` says why. See ``README.md`` in this folder for the contract ``forensics/`` relies on.
"""

from __future__ import annotations
