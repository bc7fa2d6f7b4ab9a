"""The parts of ``report.html`` that only a job report (a multi-node run's, merged) has: what
ended the job, and its nodes, each linked to its own node's page."""

from __future__ import annotations

from loaderdoctor.report.html.page import STATUS_COLORS
from loaderdoctor.report.html.page import escape as _e
from loaderdoctor.runner.model import RunReport
from loaderdoctor.units import format_seconds

NODE_PAGE = "report.html"


def job_meta(report: RunReport) -> list[str]:
    """One line: the job's id and node count, and the node and rank that ended it."""
    if report.job is None:
        return []
    job = report.job
    said = [f"job <code>{_e(job.id)}</code>" if job.id else "job (no id said)"]
    said.append(f"{job.nodes} node{'s' if job.nodes != 1 else ''}")
    if job.ended_by is not None:
        ended = job.ended_by
        rank = f", rank {ended.rank}" if ended.rank is not None else ""
        cause = f" ({_e(ended.cause)})" if ended.cause else " (its command failed on its own)"
        said.append(f"ended by <b>{_e(ended.node)}{rank}</b>{cause}")
    return [f'<p class="meta">{" · ".join(said)}</p>']


def nodes_section(report: RunReport) -> list[str]:
    """The nodes in node order: status, exit code, ranks, counts, and a link to each page."""
    if not report.nodes:
        return []
    rows = []
    for node in report.nodes:
        color = STATUS_COLORS.get(node.status, "#555")
        page = node.report.rsplit("/", 1)[0] + "/" + NODE_PAGE
        ranks = ", ".join("-" if rank is None else str(rank) for rank in node.ranks)
        rows.append(
            f'<tr><td><a href="{_e(page)}">{_e(node.name)}</a></td><td>{_e(node.host)}</td>'
            f"<td>{'' if node.rank is None else node.rank}</td>"
            f'<td style="color:{color};font-weight:600">{_e(node.status)}</td>'
            f'<td class="num">{node.exit_code}</td><td>{_e(ranks)}</td>'
            f'<td class="num">{node.delivered.batches}</td>'
            f'<td class="num">{node.delivered.samples}</td><td class="num">{node.incidents}</td>'
            f"<td>{format_seconds(node.duration_s)}</td></tr>"
        )
    return [
        "<h2>Nodes</h2><table><tr><th>node</th><th>host</th><th>node rank</th><th>status</th>"
        "<th>exit code</th><th>ranks</th><th>batches</th><th>samples</th><th>incidents</th>"
        f"<th>ran</th></tr>{''.join(rows)}</table>"
    ]
