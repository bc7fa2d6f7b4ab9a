"""``loaderdoctor run``: supervise every DataLoader of an unmodified command and report on it.

The parent side (``core``, ``memory``, ``model``) never imports torch. The child side is
imported in every Python process of the command by ``_boot/sitecustomize.py``: ``bootstrap``
(an import hook, and in the command's own process the ``lifeline`` that outlives a killed
parent), then ``patch`` once torch is imported. ``protocol`` holds what both sides share: the
environment, the file names and formats. This package imports nothing itself: start-up stays
cheap.
"""
