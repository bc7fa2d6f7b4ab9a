"""Renderers: format loaderdoctor's data objects for people and programs; they compute nothing.

One module per report for the terminal and JSON (``run_text``, ``scan``, ``tune``, ``env``,
``demo``, ``explain``, ``lint``), and one per page in ``html/`` (``html.run``, ``html.scan``,
``html.tune``, with ``html.tune_plot`` for a PNG), each with the same shape:

- ``format_json(report) -> str`` and ``format_text(report, width) -> str`` (plain, no colour);
- ``print_text(report, file=None)``: the terminal rendering (rich loads there only);
- ``format_html(report) -> str`` and ``write_html(report, path) -> Path`` where there is a page.

Shared parts: ``html.page`` (the page shell, style sheet, legend and escaping), ``html.chart``
(the one line chart), ``console`` (the one terminal), ``output`` (text any stream takes; atomic
writes) and ``loaderdoctor.units`` (bytes and durations).
"""
