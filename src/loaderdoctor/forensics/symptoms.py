"""The symptom catalog of ``loaderdoctor explain``: from the text of a failed run to its causes.

Stock PyTorch tells a user only what it saw in the main process (``DataLoader worker (pid 4242)
is killed by signal: Killed.``); the cause is elsewhere. Every row below is data: where in a
message its pattern is looked for, the causes it points at with a weight, and a note. Rows are
matched per message (forensics/log_messages.py): ``where="error"`` rows against the error text of
a traceback or of a standalone error line, anchored on its start, ``where="text"`` rows against
any line that is neither a frame nor source code (log lines, prose, errors). A row with ``needs``
fires only when the message's traceback has that frame tag (``FRAME_TAGS``); a stage tag must be
the innermost stage frame. Paths, source lines and attribute names are never matched alone.

Ties are broken by ``PRIORS``, how common each cause is among public reports of worker deaths;
``TELLS`` says for each cause the one check that confirms it, used when the log cannot decide.
A test makes sure every catalog symptom (forensics/catalog.py) is recognised by a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

RERUN = "Rerun it under `loaderdoctor run -- COMMAND`: the report names the cause and the sample."
SCRIPT = "SCRIPT"  # replaced by the script the log names, or by `your_script.py`
UNKNOWN_SCRIPT = "your_script.py"
TINY_PID = 1000  # below this, a worker's pid means a PID namespace: a container
CTRL_C = "ctrl-c"  # a tag of a traceback echoed after `^C`, as a terminal shows Ctrl-C
# Tags read from a stack's shape rather than one frame (forensics/explain.py):
STALLED = "stalled"  # a live stack (py-spy, gdb, faulthandler) waiting in the loader's get
CHILD_RUNS_SCRIPT = "child-runs-script"  # a spawned child running the script's top level
# torch's and other libraries' words for "a worker is gone", which say nothing of why: explained
# away when another row names a cause at forensics/explain.py's EXPLAINED_AT or more.
CATCH_ALLS = frozenset({"exited-unexpectedly", "background-workers-gone"})


@dataclass(frozen=True)
class Symptom:
    id: str
    # "error": an error's text, anchored; "text": any line but frames and source; "cut": the
    # innermost frame of a traceback that stops before its error line (a paste cut short);
    # "stack": any stack with the tag in ``needs`` (the pattern is unused)
    where: str
    pattern: str  # a regular expression, case-insensitive, ^ and $ per line
    causes: tuple[tuple[str, float], ...]  # (cause id, weight 0..1)
    note: str
    needs: str = ""  # a frame tag the message's traceback must have
    pid_below: int = 0  # group 1 holds pids; fires only when every one is below this
    independent: bool = False  # reads another fact of the message: counts beside its best row
    stageless: bool = False  # only where the traceback names no DataLoader stage (that decides)
    supporting: bool = False  # a warning: adds to a cause other rows name, never names one
    # For "text" rows: an ASCII line the pattern matches holds one of these words (lowercase,
    # split at anything but a-z). One set lookup per log line skips the rest; a test checks
    # that the corpus explains the same with and without this filter.
    words: tuple[str, ...] = ()


@dataclass(frozen=True)
class FrameTag:
    tag: str
    pattern: str  # matched against "path :: function :: source" of one frame
    stage: bool  # a DataLoader stage: only the innermost stage frame of a traceback counts
    # Counts only in a worker's own traceback ("Original Traceback", a `_worker_loop` frame) and
    # only when no other stage does: `__iter__` is a stream's stage there, and the main
    # process's loop (tqdm, the DataLoader's own `__iter__`) everywhere else.
    worker_fallback: bool = False


@dataclass(frozen=True)
class Tell:
    command: str  # run it (SCRIPT is replaced by the user's script)
    sign: str  # what its output shows when this is the cause


ERR = r"^\s*(?:[\w.]+\.)?"  # an error line starts with the exception's (dotted) type

FRAME_TAGS: tuple[FrameTag, ...] = (
    FrameTag("getitem", r":: __getitems?__ ::|self\.dataset\[|self\.dataset\.__getitems__", True),
    FrameTag("collate", r":: \w*collate\w* ::|[\\/]collate\.py ::|self\.collate_fn\(", True),
    FrameTag("init", r":: \w*(?:worker_init\w*|seed_worker) ::|init_fn\(worker_id\)", True),
    FrameTag("stream", r"next\(self\.dataset_iter\)|self\.dataset_iter = iter\(", True),
    FrameTag("stream", r":: __(?:iter|next)__ ::", True, worker_fallback=True),
    FrameTag("loaderdoctor", r"[\\/]loaderdoctor[\\/]", True),
    FrameTag("spawn-unpickle", r"pickle\.load\(from_parent\)|_ForkingPickler\.loads\(", False),
    FrameTag("semlock", r"synchronize\.py :: __init__|SemLock|:: (?:Queue|SimpleQueue) ::", False),
    FrameTag("feeder", r"queues\.py :: _feed ::", False),
    FrameTag(
        "waiting", r":: _try_get_(?:data|batch) ::|data_queue\.get\(|:: _pin_memory_loop ::", False
    ),
    FrameTag("sharer", r"resource_sharer\.py|:: rebuild_storage_fd ::", False),
    # torch's wait for a batch, on a POSIX path: there a worker killed by a signal, or exiting
    # with a status other than 0, is named by the SIGCHLD handler before the queue times out.
    FrameTag("posix-wait", r"^/\S* :: _try_get_data ::", False),
    FrameTag("fork", r"popen_fork\.py|os\.fork\(\)", False),
    FrameTag("rerun-main", r":: _fixup_main_from_(?:path|name) ::", False),
)

PAGING_TEXTS = (  # WinError 1455 in Windows' display languages: the message often has no code
    "paging file is too small",
    "页面文件太小",
    "分頁檔太小",
    "ページング ファイルが小さすぎ",
    "페이징 파일이 너무 작",
    "Auslagerungsdatei ist zu klein",
    "fichier de pagination est insuffisant",
    "archivo de paginación es demasiado pequeño",
    "Файл подкачки слишком мал",
    "arquivo de paginação é muito pequeno",
)

# The shell's words for a signal (glibc's strsignal, in the user's locale), as a job or a script
# that died of it prints them: the English text and its common translations.
KILLED_TEXTS = ("Killed", "已杀死", "已終止", "Getötet", "Processus arrêté", "強制終了", "Убито")
SEGV_TEXTS = (
    "Segmentation fault",
    "段错误",
    "程式記憶體區段錯誤",
    "Speicherzugriffsfehler",
    "Erreur de segmentation",
    "Violación de segmento",
    "セグメンテーション違反です",
    "Ошибка сегментирования",
    "Falha de segmentação",
)
BUS_TEXTS = (
    "Bus error",
    "总线错误",
    "匯流排錯誤",
    "Bus-Zugriffsfehler",
    "Erreur du bus",
    "Error del bus",
    "バスエラー",
    "Ошибка шины",
    "Erro de barramento",
)
CORE = r"(?:\s*\([^)]*\))?"  # "(core dumped)", "(核心已转储)", "(Speicherabzug geschrieben)"


def shell_line(texts: tuple[str, ...]) -> str:
    """A line that is the signal's text alone, or a shell's job line naming it."""
    names = "|".join(texts)
    return rf"^\s*(?:{names}){CORE}\s*$|^(?:.*: line \d+: +)?\d+ +(?:{names})\b"


SYMPTOMS: tuple[Symptom, ...] = (
    # Signals, as torch's main process reports them.
    Symptom(
        "killed-signal-killed",
        "text",
        r"killed by signal: Killed",
        (("oom-killed", 0.7), ("killed-by-signal", 0.35)),
        "SIGKILL: almost always the kernel's OOM killer; otherwise a scheduler or a person.",
        words=("killed",),
    ),
    Symptom(
        "kernel-oom",
        "text",
        r"Out of memory: Kill|\boom-kill:|\bOOMKilled\b|Memory cgroup out of memory"
        r"|\boom_reaper\b|oom[_-]kill event|low on resource: memory",
        (("oom-killed", 0.95),),
        "The kernel (or Kubernetes, or Slurm) recorded an out-of-memory kill.",
        words=("memory", "kill", "oom", "oomkilled"),
    ),
    Symptom(
        "scheduler-oom",
        "text",
        r"^srun: error: .*\bOut Of Memory\b|\bTERM_MEMLIMIT\b|PBS: job killed: (?:v?mem|pvmem)"
        r"|\bExceeded (?:job )?memory limit\b|exceeded (?:its |the )?memory limit"
        r"|killed by the cgroup out-of-memory handler",
        (("oom-killed", 0.9),),
        "The batch scheduler (Slurm, LSF, PBS) killed the job for going over its memory limit: "
        "the workers' memory counts against the job's.",
        words=("srun", "memlimit", "pbs", "exceeded", "handler"),
    ),
    Symptom(
        "shell-killed",
        "text",
        shell_line(KILLED_TEXTS) + r"|^\S*\s*Signal 9 \(SIGKILL\) received|exit code:? 137\b"
        r"|exited with (?:exit )?code 137\b|Exited \(137\)|(?:exit|status) (?:status|code) 137\b"
        r"|returned a non-zero code: 137\b",
        (("oom-killed", 0.6), ("killed-by-signal", 0.35)),
        "The shell or the launcher reports the process killed by SIGKILL (exit status 137).",
        words=("killed", "sigkill", "code", "exited", "status"),
    ),
    Symptom(
        "shm-bus-error",
        "text",
        r"bus error encountered in worker|insufficient shared memory|out of shared memory"
        r"|raise your shared memory limit",
        (("shm-exhausted", 0.9),),
        "torch's handler for SIGBUS in a worker: a write to a /dev/shm mapping with no space.",
        words=("bus", "shared", "memory"),
    ),
    Symptom(
        "bus-error",
        "text",
        r"killed by signal: Bus error|Fatal Python error: Bus error|" + shell_line(BUS_TEXTS),
        (("shm-exhausted", 0.8), ("native-crash", 0.2)),
        "SIGBUS: almost always a full /dev/shm; rarely a crash in native code.",
        words=("bus", "zugriffsfehler"),
    ),
    Symptom(
        "shm-enospc",
        "text",
        r"unable to (?:allocate shared memory|write to file <?/?torch_|mmap \d+ bytes)"
        r"|No space left on device \(28\)",
        (("shm-exhausted", 0.9),),
        "torch could not allocate the shared memory of a batch in /dev/shm.",
        words=("unable", "space"),
    ),
    Symptom(
        "shm-open-failed",
        "text",
        # Without torch's errno: with one, "Too many open files (24)" or "(28)" decides alone.
        r"unable to open shared memory object <?/?torch_\S* in read-write mode(?!.*\(\d+\))",
        (("shm-exhausted", 0.6), ("fd-exhausted", 0.45)),
        "shm_open failed for a batch's shared memory: /dev/shm is full or the process is out of "
        "file descriptors (the errno, where torch prints it, says which).",
        words=("unable",),
    ),
    Symptom(
        "semlock-enospc",
        "error",
        ERR + r"OSError: \[Errno 28\]|No space left on device",
        (("shm-exhausted", 0.9),),
        "ENOSPC while creating a DataLoader queue's semaphore: POSIX semaphores live in /dev/shm.",
        needs="semlock",
    ),
    Symptom(
        "fork-enomem",
        "error",
        ERR + r"OSError: \[Errno 12\] Cannot allocate memory",
        (("oom-killed", 0.8),),
        "ENOMEM while forking a worker: the machine (or the cgroup) had no memory left to start "
        "it; the same fixes as an OOM kill.",
        needs="fork",
    ),
    Symptom(
        "segfault",
        "text",
        r"killed by signal: Segmentation fault|segmentation fault encountered in worker"
        r"|Fatal Python error: Segmentation fault|" + shell_line(SEGV_TEXTS),
        (("native-crash", 0.85),),
        "A crash in native code (a decoder, an extension, a library not fork-safe).",
        words=("segmentation", "speicherzugriffsfehler"),
    ),
    Symptom(
        "abort",
        "text",
        r"killed by signal: (?:Aborted|Illegal instruction|Floating point exception"
        r"|Trace/BPT trap|Abort trap)|^\s*(?:Aborted|Illegal instruction|Floating point exception)"
        r"(?: \(core dumped\))?\s*$|^\s*(?:malloc\(\): .*corrupt|double free or corruption|free\(\): inv)"
        r"|^terminate called after throwing",
        (("native-crash", 0.8),),
        "An abort, a trap or an illegal instruction in native code.",
        words=("killed", "aborted", "illegal", "floating", "malloc", "double", "free", "terminate"),
    ),
    Symptom(
        "terminated",
        "text",
        r"killed by signal: Terminated|^\s*Terminated\s*$|CANCELLED AT .* DUE TO TIME LIMIT",
        (("killed-by-signal", 0.8),),
        "SIGTERM: someone or something (a scheduler, a time limit) stopped the worker.",
        words=("killed", "terminated", "cancelled"),
    ),
    Symptom(
        "exited-unexpectedly",
        "text",
        r"DataLoader worker \(pids?\(?s?\)? [\d, ]+\) exited unexpectedly(?! with exit code)",
        (
            ("oom-killed", 0.35),
            ("shm-exhausted", 0.35),
            ("native-crash", 0.35),
            ("worker-exit", 0.2),
        ),
        "torch's catch-all: a worker is gone. The lines above it often say why; alone, it cannot.",
        words=("dataloader",),
    ),
    Symptom(
        "container-pid",
        "text",
        r"DataLoader worker \(pids?\(?s?\)? ([\d, ]+)\)",
        (("shm-exhausted", 0.35),),
        "A worker pid this small means a PID namespace: a container, whose /dev/shm is 64 MB "
        "unless --shm-size (or a memory-backed volume) says otherwise.",
        pid_below=TINY_PID,
        independent=True,
        words=("dataloader",),
    ),
    Symptom(
        "exit-code",
        "text",
        r"exited unexpectedly with exit code [1-9]\d*",
        # In public threads this line alone was a worker's own exit (an exception before its
        # loop, sys.exit) most often, then a full /dev/shm in a container, then a spawned
        # worker that could not unpickle what it was sent: the lines above it decide.
        (
            ("worker-exit", 0.55),
            ("shm-exhausted", 0.3),
            ("unpicklable", 0.15),
            ("main-guard-missing", 0.1),
        ),
        "The worker ended itself with a non-zero exit code; what it printed before (above this "
        "line) says why.",
        words=("exited",),
    ),
    Symptom(
        "background-workers-gone",
        "text",
        r"Some background worker is 6 feet under|One or more background workers are no longer "
        r"alive|background workers? (?:died|is dead|are dead)",
        (("oom-killed", 0.45), ("native-crash", 0.2), ("worker-exit", 0.15)),
        "nnU-Net's (batchgenerators') catch-all for a worker process that is gone: with no "
        "error of the worker's own above it, most often the OS killed it for memory.",
        words=("background",),
    ),
    # Resource limits.
    Symptom(
        "emfile",
        "text",
        r"Too many open files|\bEMFILE\b|received \d+ items of ancdata|\[Errno 24\]",
        (("fd-exhausted", 0.9),),
        "The process ran out of file descriptors (the file_descriptor sharing strategy).",
        words=("many", "emfile", "ancdata", "errno"),
    ),
    Symptom(
        "eagain",
        "text",
        r"\[Errno 11\] Resource temporarily unavailable|can't start new thread",
        (("process-limit", 0.85),),
        "No process or thread could start: ulimit -u or a pids cgroup (docker --pids-limit).",
        words=("errno", "thread"),
    ),
    Symptom(
        "thread-limit",
        "text",
        # OpenBLAS, OpenMP (libgomp, Intel's), glibc and bash, each in its own words: every
        # worker starts a pool of threads, and each thread counts against RLIMIT_NPROC.
        r"pthread_create(?: failed)?(?: for thread \d+ of \d+)?: Resource temporarily unavailable"
        r"|\bRLIMIT_NPROC\b|libgomp: Thread creation failed|OMP: Error #34: System unable to "
        r"allocate necessary resources for OMP thread|fork: retry: Resource temporarily "
        r"unavailable|fork: Resource temporarily unavailable",
        (("process-limit", 0.85),),
        "A library could not start a thread or a process: the user's process limit (ulimit -u, "
        "RLIMIT_NPROC) or a pids cgroup is full, and the workers' thread pools count against it.",
        words=("pthread", "rlimit", "nproc", "libgomp", "omp", "fork"),
    ),
    Symptom(
        "paging-file",
        "text",
        r"WinError 1455|" + "|".join(PAGING_TEXTS),
        (("paging-file-too-small", 0.95),),
        "Windows ran out of commit space (RAM + paging file) while a worker loaded torch.",
        words=("winerror", "paging", "auslagerungsdatei", "pagination"),
    ),
    Symptom(
        "torch-dll",
        "text",
        r'Error loading "[^"]*torch[\\/]+lib[\\/]+[^"]*\.dll" or one of its dependencies',
        (("paging-file-too-small", 0.45),),
        "A spawned worker failed to load one of torch's DLLs: with many workers, commit space.",
        words=("dll",),
    ),
    # Python exceptions in the worker, by stage.
    Symptom(
        "caught-in-worker",
        "text",
        r"Caught \w+ in DataLoader worker process \d+",
        (("sample-error", 0.5), ("collate-error", 0.15), ("init-error", 0.1)),
        "A Python exception in a worker (in __getitem__, mostly; in collate_fn or worker_init_fn "
        "otherwise): the 'Original Traceback' below it says where.",
        stageless=True,
        words=("caught",),
    ),
    Symptom(
        "in-getitem",
        "error",
        r"",
        (("sample-error", 0.75),),
        "Raised inside Dataset.__getitem__ (the innermost DataLoader frame of the traceback).",
        needs="getitem",
    ),
    Symptom(
        "in-collate",
        "error",
        r"",
        (("collate-error", 0.75),),
        "Raised inside collate_fn (the innermost DataLoader frame of the traceback).",
        needs="collate",
    ),
    Symptom(
        "in-worker-init",
        "error",
        r"",
        (("init-error", 0.8),),
        "Raised inside worker_init_fn, before the worker loaded any sample.",
        needs="init",
    ),
    Symptom(
        "in-loaderdoctor",
        "error",
        r"",
        (("internal-error", 0.6),),
        "Raised inside loaderdoctor's own code, not in the dataset.",
        needs="loaderdoctor",
    ),
    Symptom(
        "in-stream",
        "error",
        r"",
        (("sample-error", 0.75),),
        "Raised while an IterableDataset produced its next item (the stream's `__iter__`): a "
        "sample error, named by its position in the worker's stream.",
        needs="stream",
    ),
    Symptom(
        "collate-none",
        "error",
        r"NoneType|\bNone\b",
        (("collate-error", 0.85),),
        "A sample of this batch is None: `__getitem__` returned None (often from an except "
        "branch or a missing return) and the collate step cannot merge it.",
        needs="collate",
    ),
    Symptom(
        "collate-found-none",
        "error",
        ERR + r"TypeError: default_collate: batch must contain .*NoneType",
        (("collate-error", 0.85),),
        "default_collate found None where a sample should be: `__getitem__` returned None.",
    ),
    Symptom(
        "sharer-gone",
        "error",
        ERR + r"(?:FileNotFoundError|ConnectionRefusedError|ConnectionResetError)\b",
        (("worker-exit", 0.6), ("oom-killed", 0.25)),
        "The worker that sent this batch was gone when the main process came for its file "
        "descriptors: it ended without an error torch could see (sys.exit(0) or os._exit(0) in "
        "the worker prints nothing; a kill by a signal would have been named).",
        needs="sharer",
    ),
    Symptom(
        "bad-image",
        "error",
        ERR + r"(?:OSError|IOError|UnidentifiedImageError|DecompressionBombError|SyntaxError"
        r"|ValueError|struct\.error|error): (?:image file is truncated|cannot identify image file"
        r"|broken data stream|Image size \(\d+ pixels\) exceeds limit|unpack requires a buffer"
        r"|decoder \w+ not available|Truncated File Read|buffer is not large enough|"
        r"not a (?:PNG|JPEG|TIFF) file|unrecognized data stream contents)",
        (("sample-error", 0.85),),
        "A decoder rejected one file: a truncated, corrupt or oversized image (a sample error).",
    ),
    Symptom(
        "collate-shapes",
        "error",
        ERR + r"RuntimeError: (?:stack expects each tensor to be equal size"
        r"|each element in list of batch should be of equal size|Trying to resize storage)"
        r"|^\s*TypeError: default_collate: batch must contain",
        (("collate-error", 0.6),),
        "The samples of one batch could not be merged (ragged shapes or odd types).",
    ),
    Symptom(
        "cuda-fork",
        "error",
        ERR + r"RuntimeError: (?:Cannot re-initialize CUDA in forked subprocess"
        r"|CUDA error:? (?:\(3\))?:? ?initialization error|cuda runtime error \(3\) : "
        r"initialization error)|cudaErrorInitializationError",
        (("cuda-in-worker", 0.9),),
        "CUDA was used in a forked worker: a forked child cannot initialise CUDA again.",
    ),
    Symptom(
        "cuda-fork-log",
        "text",
        r"THCudaCheck FAIL .*error=3 : initialization error|^CUDA initialization error\.?$"
        r"|^\s*what\(\):\s+CUDA error:? initialization error",
        (("cuda-in-worker", 0.9),),
        "CUDA's initialization error (3), printed by a worker forked after CUDA was initialised.",
        words=("thcudacheck", "cuda"),
    ),
    Symptom(
        "timeout",
        "text",
        r"DataLoader timed out after \d+ seconds",
        (("worker-hang", 0.8),),
        "A worker did not deliver within the DataLoader's timeout.",
        words=("timed",),
    ),
    # Start-up: spawn, pickling, the main guard.
    Symptom(
        "notebook-main",
        "text",
        r"Can't get attribute .* on <module '__main__' \(built-in\)>",
        (("unpicklable", 0.95),),
        "A class or function defined in a notebook cell: spawned workers cannot import it.",
        words=("attribute",),
    ),
    Symptom(
        "pickling",
        "text",
        r"Can't (?:pickle|get) local object|Can't pickle <|cannot pickle '|can't pickle \w+ objects"
        r"|(?:cannot|can't|can not) be pickled"
        r"|Can't get attribute .* on <module '__(?:mp_)?main__'|^\s*[\w.]*PicklingError: ",
        (("unpicklable", 0.9),),
        "spawn/forkserver pickle the dataset, collate_fn and worker_init_fn; this one cannot be "
        "(the wording changed in Python 3.12.5, 3.13 and 3.14; the cause did not).",
        words=("pickle", "pickled", "local", "attribute", "picklingerror"),
    ),
    Symptom(
        "spawn-unpickle",
        "error",
        ERR + r"(?:AttributeError|ModuleNotFoundError|ImportError|TypeError|RecursionError)\b",
        (("unpicklable", 0.85),),
        "A spawned worker failed while unpickling what the parent sent it (a class or an "
        "attribute it cannot find): the dataset does not survive pickling.",
        needs="spawn-unpickle",
    ),
    Symptom(
        "bootstrapping",
        "text",
        r"An attempt has been made to start a new process before|finished its bootstrapping phase"
        r"|\"freeze_support\(\)\" line can be omitted|forgotten to use the proper idiom",
        (("main-guard-missing", 0.95),),
        "The script's top level ran again in a spawned worker: no main guard.",
        words=("attempt", "bootstrapping", "freeze", "idiom"),
    ),
    Symptom(
        "broken-pipe",
        "error",
        ERR + r"BrokenPipeError: \[Errno 32\] Broken pipe",
        (("main-guard-missing", 0.5), ("unpicklable", 0.4)),
        "Windows/macOS (spawn): the worker died while the parent sent it the dataset; the "
        "worker's own error (bootstrapping, or a pickling error in the parent) says which.",
    ),
    Symptom(
        "ran-out-of-input",
        "error",
        ERR + r"EOFError: Ran out of input",
        (("unpicklable", 0.6), ("main-guard-missing", 0.3)),
        "A spawned worker read a truncated pickle: the parent failed while pickling for it.",
    ),
    Symptom(
        "feeder-failed",
        "error",
        r"",
        (("batch-lost", 0.6),),
        "The worker's queue feeder thread failed to send a finished batch.",
        needs="feeder",
    ),
    Symptom(
        "interrupted-waiting",
        "error",
        ERR + r"KeyboardInterrupt\b",
        (("worker-hang", 0.7),),
        "Interrupted while the main process waited for a batch: no worker delivered one.",
        needs="waiting",
    ),
    Symptom(
        "empty-queue-exit",
        "error",
        r"^\s*_?queue\.Empty\s*$",
        (("worker-exit", 0.45),),
        "The main process's wait for a batch timed out and found the worker gone, with no signal "
        "and no exit status named: the worker ended itself with status 0 (sys.exit(0), "
        "os._exit(0)), or the loader ran outside the main thread, where torch sees no signal.",
        needs="posix-wait",
    ),
    Symptom(
        "cut-after-ctrl-c",
        "cut",
        r":: _try_get_(?:data|batch) ::|data_queue\.get\(|:: (?:recv_bytes|_recv_bytes|_recv|recv"
        r"|get|wait|poll|_poll|select|acquire) ::",
        (("worker-hang", 0.7),),
        "Ctrl-C on a run waiting for its next batch (the paste stops before KeyboardInterrupt): "
        "no worker delivered one.",
        needs=CTRL_C,
    ),
    Symptom(
        "cut-while-waiting",
        "cut",
        r":: _try_get_(?:data|batch) ::|data_queue\.get\(|:: (?:recv_bytes|_recv_bytes|_recv"
        r"|wait) ::",
        (("worker-hang", 0.4),),
        "The paste stops inside the main process's wait for a batch, before the error: a stuck "
        "worker, unless the lines after it name another cause.",
    ),
    Symptom(
        "cut-rerunning-main",
        "cut",
        r"runpy\.py ::|:: _fixup_main_from_(?:path|name) ::|:: <module> ::",
        (("main-guard-missing", 0.5),),
        "The paste stops while a spawned worker re-runs the script's top level (Windows, macOS): "
        "without a main guard that code starts the workers again; the error line below it says.",
        needs="rerun-main",
    ),
    # Stacks as evidence, whatever printed them.
    Symptom(
        "stack-waiting",
        "stack",
        r"",
        (("worker-hang", 0.75),),
        "A live stack (py-spy, gdb, faulthandler) of the main process waiting in the loader's "
        "get with no error: no worker delivered a batch (the same stack as a Ctrl-C's).",
        needs=STALLED,
    ),
    Symptom(
        "child-runs-script",
        "stack",
        r"",
        (("main-guard-missing", 0.85),),
        "A spawned worker's stack runs the script's top level past its imports (multiprocessing "
        "re-runs the main module in each child): without a main guard it starts the work again.",
        needs=CHILD_RUNS_SCRIPT,
    ),
    # loaderdoctor's own words when healing stopped on a failure every sample shared.
    Symptom(
        "healing-stopped",
        "text",
        r"loaderdoctor stopped healing:|\[shared-failure\b",
        (("shared-failure", 0.95),),
        "Healing stopped: one failure hit sample after sample, so it is not the samples'.",
        words=("healing", "shared"),
    ),
    # macOS.
    Symptom(
        "objc-fork",
        "text",
        r"may have been in progress in another thread when fork\(\) was called"
        r"|_share_filename_: only available on CPU",
        (("mps-in-worker", 0.85),),
        "macOS: MPS or Objective-C state in a forked worker, or an MPS tensor returned by one.",
        words=("fork", "filename"),
    ),
    # Prose: what users write when there is no message at all.
    Symptom(
        "worker-count-warning",
        "text",
        r"This DataLoader will create \d+ worker processes in total"
        r"|excessive worker creation might get DataLoader running slow or even freeze",
        (("worker-hang", 0.3),),
        "torch's warning of more workers than usable cores: it supports a hang the log shows; "
        "alone, in a run that went on, it is advice, not a failure.",
        supporting=True,
        words=("dataloader", "excessive"),
    ),
    Symptom(
        "prose-hang",
        "text",
        r"^(?!.*(?:excessive worker creation|suggested max number of worker))"
        r"(?=.*\b(?:hangs?|hanging|hung|stuck|freez(?:es|ing|e)|froze|frozen|stall(?:s|ed)?"
        r"|deadlock(?:s|ed)?|stop(?:s|ped)? (?:with|without|running|responding|working)"
        r"|just stops?"
        r"|never (?:ends|returns|finishes))\b)"
        r"(?=.*\b(?:epoch|training|dataloader|data ?loader|iteration|batch|loader|num_workers|run"
        r"|workers?|no (?:other )?(?:error|message|output)|forever)\b)",
        (("worker-hang", 0.6), ("batch-lost", 0.2)),
        "A report of a run that stopped making progress with no error (stock torch also waits "
        "forever for a batch its worker could not send).",
        words=(
            "hang",
            "hangs",
            "hanging",
            "hung",
            "stuck",
            "freeze",
            "freezes",
            "freezing",
            "froze",
            "frozen",
            "stall",
            "stalls",
            "stalled",
            "deadlock",
            "deadlocks",
            "deadlocked",
            "stop",
            "stops",
            "stopped",
            "never",
        ),
    ),
    Symptom(
        "prose-oom",
        "text",
        r"(?<![/A-Za-z0-9_-])oom[- ]?killer(?![A-Za-z0-9_])|\bkilled by (?:the )?oom\b",
        (("oom-killed", 0.6),),
        "The report says the OOM killer acted (a message the paste does not show).",
        words=("oom",),
    ),
    Symptom(
        "prose-native",
        "text",
        # ASCII word edges: a CJK sentence runs straight into "double free"
        r"(?<![/A-Za-z0-9_-])(?:double free|segfault|segmentation fault)(?![A-Za-z0-9_])"
        r"|段错误|段錯誤",
        (("native-crash", 0.6),),
        "The report names a crash in native code (a message the paste does not show).",
        words=("double", "segfault", "segmentation"),
    ),
    Symptom(
        "prose-silent",
        "text",
        r"^(?=.*\b(?:no (?:other )?(?:error|message|output|traceback)"
        r"|without (?:any )?(?:error|message)|nothing (?:is )?printed)\b)"
        r"(?=.*\b(?:dataloader|data ?loader|loader|training|epoch|workers?|stops?|stopped|just)\b)",
        (("worker-hang", 0.3),),
        "No error at all, said of a training run: a stuck worker prints nothing.",
        words=("no", "without", "nothing"),
    ),
)

# How common each cause is among public reports of DataLoader worker deaths: rough shares,
# estimated from the GitHub issue threads found while writing tests/fixtures/explain/corpus (a
# search per message: `killed by signal: Killed` threads outnumber every other kind, then /dev/shm
# and bus errors, then errors in a sample). Only their order matters, and only among causes the
# log cannot tell apart: a prior never adds a cause or outweighs what the log shows.
PRIORS: dict[str, float] = {
    "oom-killed": 0.20,
    "shm-exhausted": 0.16,
    "sample-error": 0.12,
    "unpicklable": 0.10,
    "main-guard-missing": 0.07,
    "native-crash": 0.07,
    "collate-error": 0.05,
    "paging-file-too-small": 0.05,
    "fd-exhausted": 0.04,
    "cuda-in-worker": 0.04,
    "worker-hang": 0.04,
    "killed-by-signal": 0.02,
    "worker-exit": 0.01,
    "init-error": 0.01,
    "mps-in-worker": 0.01,
    "process-limit": 0.01,
    "batch-lost": 0.01,
    "internal-error": 0.0,
    "shared-failure": 0.0,  # said by loaderdoctor itself: its own line names it
}

TELLS: dict[str, Tell] = {
    "oom-killed": Tell(
        "dmesg -T | grep -i -E 'killed process|out of memory'",
        "a 'Killed process' line naming a worker's pid",
    ),
    "shm-exhausted": Tell("df -h /dev/shm", "a Size of 64M, or Use% near 100% while it runs"),
    "native-crash": Tell(
        "python -X faulthandler SCRIPT",
        "(with num_workers=0) 'Fatal Python error: Segmentation fault' and the crash's stack",
    ),
    "worker-exit": Tell(
        "grep -B 30 'exited unexpectedly' YOUR_LOG",
        "the worker's own error or exit message, printed above torch's line",
    ),
    "killed-by-signal": Tell(
        "dmesg -T | grep -i killed", "nothing: no OOM kill, so a scheduler or a person"
    ),
    "fd-exhausted": Tell("ulimit -n", "1024 or less (256 in a macOS shell)"),
    "process-limit": Tell(
        "ulimit -u; cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max",
        "a limit near the number of processes and threads running",
    ),
    "sample-error": Tell("python SCRIPT", "(with num_workers=0) the traceback of one sample"),
    "collate-error": Tell("python SCRIPT", "(with num_workers=0) the traceback in collate_fn"),
    "unpicklable": Tell("loaderdoctor lint SCRIPT", "a lambda or local function handed over"),
    "main-guard-missing": Tell("loaderdoctor lint SCRIPT", "LD101: no main guard"),
    "worker-hang": Tell("py-spy dump --pid PID", "a worker's stack, stuck in one call"),
    "paging-file-too-small": Tell(
        'systeminfo | findstr /C:"Virtual Memory"', "Available near 0 MB"
    ),
}

NEXT_CHECKS: dict[str, tuple[str, ...]] = {
    "oom-killed": (
        "dmesg -T | grep -i -E 'killed process|out of memory'",
        "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control",
        "free -h",
    ),
    "killed-by-signal": (
        "dmesg -T | grep -i killed   (no OOM record: look at the scheduler's or the container's logs)",
    ),
    "shm-exhausted": (
        "df -h /dev/shm",
        "docker inspect --format '{{.HostConfig.ShmSize}}' CONTAINER   (in Docker: --shm-size 8g)",
    ),
    "native-crash": (
        "python -X faulthandler SCRIPT   (prints the Python stack of the crash)",
        "rerun with num_workers=0: the crash moves to the main process, with its stack",
    ),
    "worker-exit": ("grep -n -E 'sys.exit|os._exit|exit\\(' on the Dataset and its transforms",),
    "fd-exhausted": (
        "ulimit -n",
        "ls /proc/PID/fd | wc -l   (PID of a worker)",
    ),
    "sample-error": ("read the 'Original Traceback' in the log; then `dataset[INDEX]` in a shell",),
    "collate-error": ("print the shape of each sample of the failing batch",),
    "init-error": ("call worker_init_fn(0) in the main process before building the loader",),
    "worker-hang": ("py-spy dump --pid PID   (PID of the stuck worker)",),
    "unpicklable": (
        "loaderdoctor lint SCRIPT",
        "python -c 'import pickle; pickle.dumps(DATASET)'",
    ),
    "main-guard-missing": ("loaderdoctor lint SCRIPT",),
    "cuda-in-worker": ("loaderdoctor lint SCRIPT",),
    "paging-file-too-small": (
        'systeminfo | findstr /C:"Virtual Memory"   (the commit limit and what is in use)',
        "loaderdoctor lint --platform windows SCRIPT",
    ),
    "mps-in-worker": ("loaderdoctor lint --platform macos SCRIPT",),
}
