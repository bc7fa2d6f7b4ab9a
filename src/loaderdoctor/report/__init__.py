"""Renderers: format loaderdoctor data objects (terminal, JSON, HTML)."""
