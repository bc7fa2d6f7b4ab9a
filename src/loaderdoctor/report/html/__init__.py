"""The HTML pages and plots: one page shell (``page``), one line chart (``chart``), and a page per
report (``run``, ``scan``, ``tune``; ``tune_plot`` paints the tune chart as a PNG)."""
