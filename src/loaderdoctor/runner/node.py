"""Which node of a multi-node job one ``loaderdoctor run`` supervises, and its report's folder.

torchrun is started once per node, and so is ``loaderdoctor run -- torchrun ...``: every node
names the same report dir (a shared file system), each run writes into a folder of its own under
it, and ``loaderdoctor report DIR`` merges the folders into one job report (``runner.job``).
What the node is comes from where the user already said it: torchrun's own options, else the
environment a scheduler sets (SLURM) or a launcher script exports (``NODE_RANK``).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence

from loaderdoctor.runner.model import NodeInfo

LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's options that take no value; every other option does (``--nnodes 2``).
LAUNCHER_FLAGS = frozenset(
    {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}
)
NODE_RANK_ENVS = ("NODE_RANK", "SLURM_NODEID", "GROUP_RANK")
# GROUP_WORLD_SIZE: torchrun's node count, beside GROUP_RANK, where a launcher runs us under it
NNODES_ENVS = ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "GROUP_WORLD_SIZE")
NODE_PREFIX = "node"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def launcher_options(command: Sequence[str]) -> dict[str, str] | None:
    """torchrun's options before its script (``node-rank``: ``"1"``, spelt with dashes), or
    None when ``command`` is not torchrun (``torchrun ...``, ``python -m torch.distributed.run``)."""
    if not command:
        return None
    if os.path.basename(command[0]) == "torchrun":
        args = list(command[1:])
    else:
        module = next((i for i, part in enumerate(command[:-1]) if part == "-m"), None)
        if module is None or command[module + 1] not in LAUNCHER_MODULES:
            return None
        args = list(command[module + 2 :])
    options: dict[str, str] = {}
    position = 0
    while position < len(args) and args[position].startswith("-"):
        name, equals, value = args[position].partition("=")
        position += 1
        if not equals and name not in LAUNCHER_FLAGS and position < len(args):
            value = args[position]
            position += 1
        options[name.lstrip("-").replace("_", "-")] = value
    return options


def _most_nodes(nnodes: str) -> int | None:
    """``"2"`` -> 2, ``"1:4"`` -> 4; None for anything else."""
    most = nnodes.rpartition(":")[2]
    return int(most) if most.isdigit() else None


def node_of(
    command: Sequence[str], environ: Mapping[str, str], host: str | None = None, pid: int = 0
) -> NodeInfo | None:
    """The node this run supervises, or None for a single-machine run (its report stays in the report dir itself).

    A job is multi-node when torchrun's ``--nnodes`` (or SLURM's node count) says more than one,
    or, with no count given, when a node rank is. Its folder is ``node<RANK>-<host>``: two nodes
    on one machine differ by rank; with no rank yet (an elastic rendezvous assigns it later) the
    run's pid keeps them apart.
    """
    if command and command[0] == "--":
        command = command[1:]
    launcher = launcher_options(command)
    options = launcher or {}
    # torchrun's own default is one node, whatever the environment says
    nnodes = options.get("nnodes", "1") if launcher is not None else None
    nnodes = nnodes or next((environ[name] for name in NNODES_ENVS if environ.get(name)), None)
    given = options.get("node-rank") or next(
        (environ[name] for name in NODE_RANK_ENVS if environ.get(name, "").isdigit()), None
    )
    rank = int(given) if given is not None and given.isdigit() else None
    most = _most_nodes(nnodes) if nnodes is not None else None
    if (most is not None and most <= 1) or (most is None and rank is None):
        return None
    host = host if host is not None else socket.gethostname()
    return NodeInfo(
        name=node_folder(rank, host, pid),
        host=host,
        rank=rank,
        nnodes=nnodes,
        job_id=job_id_of(options, environ),
    )


def node_folder(rank: int | None, host: str, pid: int) -> str:
    """``node1-gpu07``: the node's folder under the job's report dir (host made file-name safe)."""
    safe_host = _UNSAFE.sub("-", host).strip("-") or "host"
    if rank is None:
        return f"{NODE_PREFIX}-{safe_host}-{pid}"
    return f"{NODE_PREFIX}{rank}-{safe_host}"


def job_id_of(options: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """What every node of one job shares: the scheduler's job id, torchrun's ``--rdzv-id``, else
    the rendezvous address all nodes meet at."""
    if environ.get("SLURM_JOB_ID"):
        return f"slurm:{environ['SLURM_JOB_ID']}"
    if options.get("rdzv-id") and options["rdzv-id"] != "none":
        return f"rdzv-id:{options['rdzv-id']}"
    if options.get("rdzv-endpoint"):
        return f"rdzv:{options['rdzv-endpoint']}"
    addr = options.get("master-addr") or environ.get("MASTER_ADDR")
    port = options.get("master-port") or environ.get("MASTER_PORT")
    return f"master:{addr}:{port}" if addr and port else None
