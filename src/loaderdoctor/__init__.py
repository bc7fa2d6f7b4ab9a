"""loaderdoctor: every PyTorch DataLoader worker death gets a verdict."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
