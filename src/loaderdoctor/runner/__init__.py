"""``loaderdoctor run``: supervise every DataLoader of an unmodified command and report on it.

The parent side (``core``, ``memory``, ``model``) never imports torch; the child side
(``bootstrap``, ``patch``) is loaded in every Python process of the command by
``_boot/sitecustomize.py``, so this package imports nothing itself: start-up stays cheap.
"""
