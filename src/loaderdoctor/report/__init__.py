"""Renderers: format loaderdoctor's data objects for people and programs; they compute nothing.

One module per report (``run_text``/``run_html``, ``scan``/``scan_html``, ``tune``/``tune_html``/
``tune_plot``, ``env``, ``demo``, ``explain``, ``lint``), each with the same shape:

- ``format_json(report) -> str`` and ``format_text(report, width) -> str`` (plain, no colour);
- ``print_text(report, file=None)``: the terminal rendering (rich loads there only);
- ``format_html(report) -> str`` and ``write_html(report, path) -> Path`` where there is a page.

Shared parts: ``html`` (the page shell, style sheet, legend and escaping), ``chart`` (the one line
chart), ``console`` (the one terminal), ``output`` (text any stream takes; atomic writes) and
``loaderdoctor.units`` (bytes and durations).
"""
