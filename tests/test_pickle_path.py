"""Where the object pickle refuses lies: an attribute path a user can follow, and its type."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

from loaderdoctor.supervise.parent.collect import exit_frame
from loaderdoctor.supervise.pickle_path import describe_type, unpicklable_path


class Compose:
    def __init__(self, transforms: list[object]) -> None:
        self.transforms = transforms


class Images:
    def __init__(self, transform: object) -> None:
        self.files = [f"{n}.jpg" for n in range(1000)]
        self.transform = transform


def test_a_lambda_in_a_transform_list_is_named_by_its_path() -> None:
    dataset = Images(Compose([abs, lambda image: image]))
    assert unpicklable_path(dataset, "dataset", ForkingPickler.dumps) == (
        "dataset.transform.transforms[1]",
        "lambda",
    )


def test_a_generator_in_a_batch_and_the_batch_itself() -> None:
    inner = {"image": [1, 2], "labels": (n for n in range(3))}
    assert unpicklable_path(inner, "batch", pickle.dumps) == ("batch['labels']", "generator")
    assert unpicklable_path((n for n in range(3)), "batch", pickle.dumps) == (
        "batch",
        "generator",
    )


def test_a_nested_function_is_described_by_its_qualified_name() -> None:
    def make() -> object:
        def scale(x: float) -> float:
            return x * 2

        return scale

    assert describe_type(make()) == (
        "function 'test_a_nested_function_is_described_by_its_qualified_name.<locals>.make."
        "<locals>.scale'"
    )


def test_the_frame_that_called_exit_is_the_innermost_of_the_recorded_traceback() -> None:
    log = (
        "Fatal Python error: ...\n\n"  # a faulthandler dump before it is not the exit's
        "loaderdoctor: the worker called exit\n"
        "Traceback (most recent call last):\n"
        '  File "/src/loaderdoctor/supervise/worker/datasets.py", line 123, in __getitems__\n'
        "    samples.append(dataset[index])\n"
        '  File "/site-packages/tool/cli.py", line 40, in main\n'
        "    sys.exit(0)\n"
        "SystemExit: 0\n"
    )
    assert exit_frame(log) == "/site-packages/tool/cli.py:40 in main"
    assert exit_frame('Current thread 0x1:\n  File "a.py", line 1 in f') is None
    assert exit_frame(None) is None
