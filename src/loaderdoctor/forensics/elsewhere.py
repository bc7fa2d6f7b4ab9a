"""Failures ``loaderdoctor explain`` recognises as *not* DataLoader failures, so it can say so.

A run that dies of a GPU out-of-memory error or a device-side assert often has a DataLoader in
its traceback (the batch was in flight) and ``num_workers`` in its advice threads; rerunning
with ``num_workers=0`` changes nothing. Naming such a failure keeps a user from chasing the
loader. Rows are data, matched like the "text" rows of forensics/symptoms.py (any line of a
message but frames and source); they never add a DataLoader cause.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Elsewhere:
    id: str
    pattern: str  # a regular expression, case-insensitive, ^ and $ per line
    title: str  # what failed, in the words of a verdict
    note: str  # where to look instead
    words: tuple[str, ...]  # an ASCII line the pattern matches holds one (see Symptom.words)


ELSEWHERE: tuple[Elsewhere, ...] = (
    Elsewhere(
        "cuda-oom",
        r"CUDA out of memory|OutOfMemoryError: CUDA|CUDA error: out of memory"
        r"|cuda runtime error \(2\) : out of memory|CUBLAS_STATUS_ALLOC_FAILED",
        "a GPU out-of-memory error (the model's memory on the GPU, not the workers' RAM)",
        "Lower the batch size or the model's memory (mixed precision, gradient checkpointing); "
        "num_workers does not change GPU memory.",
        ("cuda", "outofmemoryerror", "cublas"),
    ),
    Elsewhere(
        "device-assert",
        r"device-side assert triggered|cuda runtime error \(59\)",
        "a device-side assert in a CUDA kernel (an index out of range: a label >= the number "
        "of classes, a token id >= the vocabulary)",
        "Rerun with CUDA_LAUNCH_BLOCKING=1 (or on the CPU) to see the operation and the "
        "out-of-range value.",
        ("device", "cuda"),
    ),
    Elsewhere(
        "cuda-kernel",
        r"an illegal memory access was encountered|CUDNN_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR)"
        r"|no kernel image is available for execution|CUDA error: unspecified launch failure",
        "a CUDA kernel failure on the GPU (an illegal access, a cuDNN failure, or a build "
        "without kernels for this GPU)",
        "Rerun with CUDA_LAUNCH_BLOCKING=1; check that the torch build supports the GPU.",
        ("illegal", "cudnn", "kernel", "unspecified"),
    ),
    Elsewhere(
        "collective-timeout",
        r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*[Tt]imeout"
        r"|NCCL (?:error|communicator was aborted)",
        "a distributed collective (NCCL) that timed out or failed between ranks",
        "Look at the rank that stopped first (its own error is the cause); NCCL_DEBUG=INFO "
        "and TORCH_NCCL_ASYNC_ERROR_HANDLING name it.",
        ("watchdog", "processgroupnccl", "nccl"),
    ),
    Elsewhere(
        "state-dict",
        r"Error\(s\) in loading state_dict|size mismatch for \S+: copying a param",
        "a checkpoint that does not fit the model (load_state_dict)",
        "Compare the checkpoint's keys and shapes with the model's.",
        ("error", "mismatch"),
    ),
    Elsewhere(
        "model-shapes",
        r"mat1 and mat2 shapes cannot be multiplied|Expected input batch_size \(\d+\) to match "
        r"target batch_size|Expected all tensors to be on the same device",
        "a shape or device mismatch in the model's forward or loss",
        "Print the shapes (and devices) of the batch and of the layer named in the traceback.",
        ("shapes", "expected"),
    ),
)
