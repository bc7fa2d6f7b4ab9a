"""Name the likely causes of a failed run from its log or error message alone (file or stdin)."""

from __future__ import annotations

import argparse
import sys

from loaderdoctor.cli import CommandError, ExitCode

FOUND = ExitCode.OK  # like grep: 0 when a cause was named
NOTHING_FOUND = ExitCode.FINDINGS  # 1 when the text shows no known DataLoader failure

EPILOG = """\
examples:
  loaderdoctor explain train.log
  python train.py 2>&1 | tail -200 | loaderdoctor explain -
  loaderdoctor explain            (paste the error, then Ctrl-D; Ctrl-Z Enter on Windows)

The log is read as it streams (a 100 MB log in seconds, in constant memory), UTF-8 or UTF-16
(PowerShell's `>`). Its structure is read first: words a terminal wrapped, lines another process
interleaved (launcher prefixes such as [rank1]: keep processes apart), tracebacks pasted as one
escaped string, and stacks from py-spy dump, gdb's py-bt and faulthandler. A cause is named from
the messages torch, Python, the kernel and libraries such as OpenBLAS print, and from the stacks'
frames (a pattern is never matched in a path or an attribute name alone); a warning never names
a cause by itself. When the log cannot tell causes apart ("ambiguous"), or supports several with
none likely enough ("undecided"), the answer lists them with their likelihoods and gives the one
check that decides; the report of `loaderdoctor run -- COMMAND` always can. A log that stops inside a
traceback (a paste cut short, a Ctrl-C echoed as ^C) is answered from the lines it has, marked
partial, with the line after which the rest would settle it. Schedulers' and containers' words
for a memory kill (Slurm, LSF, PBS, Kubernetes OOMKilled, exit code 137) read as an OOM kill. A
failure that is not the DataLoader's (a GPU out-of-memory error, a device-side assert) is named
as such: exit status 1, like a log with no failure.

exit status:
  0  a cause was named (one, or several ranked; "ambiguous" or "undecided" when the log
     cannot decide)
  1  nothing found: no known DataLoader failure in the text
  2  the log cannot be read (a missing file, a directory)
"""


def register(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "logfile",
        nargs="?",
        metavar="LOGFILE",
        help="the log of the failed run; - or nothing reads standard input",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the causes and the matched lines as JSON"
    )
    parser.add_argument(
        "--cause",
        metavar="ID",
        help="print the page of one cause (what it means, how it is proven, the fixes), as "
        "docs/causes/ID.md has it, from the installed catalog: a verdict's 'more:' line",
    )


def cause_page(cause_id: str) -> str:
    """The cause's documentation page, rendered from the catalog this loaderdoctor ships: the
    same text as ``docs/causes/ID.md`` in a checkout, wherever loaderdoctor is installed."""
    from loaderdoctor.docs import render_cause_page
    from loaderdoctor.forensics.catalog import CAUSES

    if cause_id not in CAUSES:
        raise CommandError(f"--cause {cause_id}: no such cause (known: {', '.join(CAUSES)})")
    return render_cause_page(CAUSES[cause_id])


def run(args: argparse.Namespace) -> int:
    if args.cause is not None:
        if args.logfile is not None:
            raise CommandError("--cause ID prints a cause's page: give it no LOGFILE")
        sys.stdout.write(cause_page(args.cause))
        return ExitCode.OK
    from loaderdoctor.forensics.explain import explain_lines
    from loaderdoctor.forensics.log_messages import read_log_lines
    from loaderdoctor.report.explain import format_json, format_text

    if args.logfile in (None, "-"):
        if sys.stdin.isatty():
            print("loaderdoctor explain: paste the error, then Ctrl-D", file=sys.stderr)
        explanation = explain_lines(read_log_lines(sys.stdin.buffer))
    else:
        try:
            with open(args.logfile, "rb") as handle:
                explanation = explain_lines(read_log_lines(handle))
        except OSError as error:
            raise CommandError(f"cannot read {args.logfile}: {error.strerror or error}") from None
    sys.stdout.write(format_json(explanation) if args.json else format_text(explanation))
    return FOUND if explanation.causes else NOTHING_FOUND
