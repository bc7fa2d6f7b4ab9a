"""Unit tests of the rules: shapes that must be found, and ordinary code that must not be."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from loaderdoctor.lint import RULES, LintFinding, LintReport, check_source


def codes(source: str, **options: object) -> list[str]:
    return [f.code for f in check_source(textwrap.dedent(source), "t.py", **options)]  # type: ignore[arg-type]


HEADER = "import torch\nfrom torch.utils.data import DataLoader, Dataset\n"


def test_catalog_rows_are_complete() -> None:
    for code, rule in RULES.items():
        assert code == rule.code and code.startswith("LD") and len(code) == 5
        assert rule.title and rule.why.endswith(".") and rule.fix.endswith(".")
        assert not rule.title.endswith(".")


def test_check_source_for_main_guard_only() -> None:
    source = (
        HEADER
        + "loader = DataLoader(ds, num_workers=2, collate_fn=lambda b: b)\nfor b in loader:\n    pass\n"
    )
    findings = check_source(source, "train.py", select=["LD101"])
    assert [(f.path, f.line, f.col, f.code) for f in findings] == [("train.py", 3, 10, "LD101")]
    assert findings[0].fix == RULES["LD101"].fix


@pytest.mark.parametrize(
    "workers",
    ["4", "W", "args.workers", "min(4, os.cpu_count())", "os.cpu_count()", "int('3')", "2 * W"],
)
def test_num_workers_resolved_like_a_reader(workers: str) -> None:
    source = f"""
    import argparse, os
    from torch.utils.data import DataLoader
    W = 2
    parser = argparse.ArgumentParser()
    parser.add_argument("-w", "--workers", type=int, default=3)
    args = parser.parse_args()
    for batch in DataLoader(ds, num_workers={workers}):
        pass
    """
    assert codes(source) == ["LD101"]


def test_zero_workers_stay_silent() -> None:
    source = """
    from torch.utils.data import DataLoader
    Z = 0
    for batch in DataLoader(ds, num_workers=Z, collate_fn=lambda b: b):
        pass
    """
    assert codes(source) == []


@pytest.mark.parametrize(
    ("workers", "said"),
    [
        ("args.workers", "args.workers (from the command line: possibly > 0)"),
        ("cfg.num_workers", "cfg.num_workers (from a config: possibly > 0)"),
        ("os.cpu_count() - 1", "os.cpu_count() - 1 (not known statically: possibly > 0)"),
        ("0 if x else 4", "0 if x else 4 (not known statically: possibly > 0)"),
        ("args.zero", "args.zero (0 by default, set on the command line)"),
    ],
)
def test_configured_workers_count_as_possibly_positive(workers: str, said: str) -> None:
    source = f"""
    import argparse, os
    from torch.utils.data import DataLoader
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int)
    parser.add_argument("--zero", type=int, default=0)
    args = parser.parse_args()
    for batch in DataLoader(ds, num_workers={workers}, collate_fn=lambda b: b):
        pass
    """
    findings = check_source(textwrap.dedent(source), "t.py")
    assert [f.code for f in findings] == ["LD101", "LD102"]
    assert findings[0].message.startswith(f"DataLoader with num_workers={said} is created")
    assert findings[1].message.endswith(f"(num_workers={said})")


def test_kwargs_and_parameters_count_as_possibly_positive() -> None:
    source = """
    from torch.utils.data import DataLoader
    def make(ds, n, **kwargs):
        a = DataLoader(ds, num_workers=n, collate_fn=lambda b: b)
        b = DataLoader(ds, collate_fn=lambda b: b, **kwargs)
        c = DataLoader(ds, collate_fn=lambda b: b, **dict(batch_size=2))
        return a, b, c
    """
    messages = [f.message for f in check_source(textwrap.dedent(source), "t.py")]
    assert [m.rsplit("(num_workers=", 1)[-1] for m in messages] == [
        "n (a parameter of `make()`: possibly > 0))",
        "? (`**kwargs` may set it: possibly > 0))",
    ]


@pytest.mark.parametrize(
    "spelling",
    [
        "from torch.utils.data import DataLoader as DL\nDL",
        "import torch\ntorch.utils.data.DataLoader",
        "import torch.utils.data as data\ndata.DataLoader",
        "from torch.utils import data\ndata.DataLoader",
        "from loaderdoctor import DataLoader\nDataLoader",
        "import loaderdoctor\nloaderdoctor.DataLoader",
    ],
)
def test_dataloader_spellings(spelling: str) -> None:
    imports, name = spelling.rsplit("\n", 1)
    assert codes(f"{imports}\nfor b in {name}(ds, num_workers=2):\n    pass\n") == ["LD101"]


def test_other_dataloaders_are_not_ours() -> None:
    source = "from torch_geometric.loader import DataLoader\nfor b in DataLoader(ds, num_workers=2):\n    pass\n"
    assert codes(source) == []
    source = "class DataLoader:\n    pass\nfor b in DataLoader(ds, num_workers=2):\n    pass\n"
    assert codes(source) == []


def test_main_guard_and_fork_silence_ld101() -> None:
    guarded = (
        HEADER
        + 'if __name__ == "__main__":\n    for b in DataLoader(ds, num_workers=2):\n        pass\n'
    )
    assert codes(guarded) == []
    forked = (
        HEADER
        + 'for b in DataLoader(ds, num_workers=2, multiprocessing_context="fork"):\n    pass\n'
    )
    assert codes(forked) == []


def test_loader_created_at_top_level_but_iterated_under_guard_is_fine() -> None:
    source = (
        HEADER
        + 'loader = DataLoader(ds, num_workers=2)\nprint(len(loader))\nif __name__ == "__main__":\n    for b in loader:\n        pass\n'
    )
    assert codes(source) == []


def test_set_start_method_fork_silences_ld102_but_spawn_context_does_not() -> None:
    body = "def main():\n    for b in DataLoader(ds, num_workers=2, collate_fn=lambda b: b{extra}):\n        pass\n"
    fork = "import multiprocessing as mp\n" + HEADER + 'mp.set_start_method("fork", force=True)\n'
    assert codes(fork + body.format(extra="")) == []
    assert codes(fork + body.format(extra=', multiprocessing_context="spawn"')) == ["LD102"]
    ctx = "import multiprocessing as mp\n" + HEADER + 'CTX = mp.get_context("fork")\n'
    assert codes(ctx + body.format(extra=", multiprocessing_context=CTX")) == []


def test_picklable_callables_are_fine() -> None:
    source = HEADER + textwrap.dedent(
        """
        import functools
        def collate(batch, scale=1):
            return batch
        class Collate:
            def __call__(self, batch):
                return batch
        class Module:
            def collate(self, batch):
                return batch
            def loader(self):
                return DataLoader(ds, num_workers=2, collate_fn=self.collate)
        def main():
            a = DataLoader(ds, num_workers=2, collate_fn=functools.partial(collate, scale=2))
            b = DataLoader(ds, num_workers=2, collate_fn=Collate(), worker_init_fn=seed_all)
            c = DataLoader(ds, num_workers=2, sampler=torch.utils.data.RandomSampler(ds))
            files = sorted(names, key=lambda n: n.lower())
            d = DataLoader(MyDataset(list(filter(lambda p: p, files))), num_workers=2)
            return a, b, c, d
        """
    )
    assert codes(source) == []


def test_cuda_questions_and_cpu_devices_are_fine() -> None:
    source = HEADER + textwrap.dedent(
        """
        class Images(Dataset):
            def __init__(self):
                self.device = "cpu"
            def __len__(self):
                return 1
            def __getitem__(self, index):
                if torch.cuda.is_available():
                    pass
                return torch.zeros(1, device="cpu").to(self.device).to(torch.float16)
        """
    )
    assert codes(source) == []


def test_cuda_in_dataset_used_only_with_zero_workers_is_fine() -> None:
    source = HEADER + textwrap.dedent(
        """
        class Gpu(Dataset):
            def __len__(self):
                return 1
            def __getitem__(self, index):
                return torch.zeros(1).cuda()
        def main():
            return DataLoader(Gpu(), batch_size=4)
        """
    )
    assert codes(source) == []


def test_duck_typed_container_is_a_dataset_only_when_loaded() -> None:
    vocab = textwrap.dedent(
        """
        import os, torch
        class Vocab:
            def __init__(self, root):
                self.words = [w for w in os.listdir(root)]
            def __len__(self):
                return len(self.words)
            def __getitem__(self, i):
                return self.words[i].cuda()
        """
    )
    assert codes(vocab) == []
    used = (
        vocab
        + "from torch.utils.data import DataLoader\ndef main():\n    return DataLoader(Vocab('.'), num_workers=2)\n"
    )
    assert codes(used) == ["LD103"]  # a list of file names is only info for LD107
    assert sorted(codes(used, min_severity="info")) == ["LD103", "LD107"]


def test_lazily_opened_handles_and_reseeded_generators_are_fine() -> None:
    source = HEADER + textwrap.dedent(
        """
        import h5py, numpy as np
        class Lazy(Dataset):
            def __init__(self, path):
                self.path = path
                self.file = None
                self.rng = np.random.default_rng(0)
                probe = h5py.File(path, "r")
                self.length = len(probe["x"])
                probe.close()
            def __len__(self):
                return self.length
            def __getitem__(self, index):
                if self.file is None:
                    self.file = h5py.File(self.path, "r")
                return self.file["x"][index] + self.rng.normal()
        def worker_init_fn(worker_id):
            info = torch.utils.data.get_worker_info()
            info.dataset.rng = np.random.default_rng(info.seed)
        """
    )
    assert codes(source) == []


def test_opencv_silenced_by_set_num_threads_in_worker_init() -> None:
    source = HEADER + textwrap.dedent(
        """
        import cv2
        class Frames(Dataset):
            def __len__(self):
                return 1
            def __getitem__(self, index):
                return cv2.resize(cv2.imread("x.png"), (8, 8))
        def worker_init_fn(worker_id):
            cv2.setNumThreads(0)
        """
    )
    assert codes(source) == []
    assert codes(source.replace("cv2.setNumThreads(0)", "pass")) == ["LD108"]


def test_epoch_and_fold_loops_may_create_loaders() -> None:
    source = HEADER + textwrap.dedent(
        """
        def main():
            for fold in range(5):
                loader = DataLoader(ds, num_workers=4)
                for epoch in range(3):
                    for batch in loader:
                        pass
        """
    )
    assert codes(source) == []


def test_ld105_ignores_defaults_and_unknowns() -> None:
    source = HEADER + textwrap.dedent(
        """
        a = DataLoader(ds, persistent_workers=False, prefetch_factor=None, timeout=0)
        b = DataLoader(ds, num_workers=4, persistent_workers=True, prefetch_factor=2, timeout=60)
        c = DataLoader(ds, prefetch_factor=pf)
        d = DataLoader(ds, **options, persistent_workers=True)
        """
    )
    assert codes(source) == []


def test_noqa_forms() -> None:
    line = "for b in DataLoader(ds, num_workers=2, persistent_workers=True):\n    pass\n"
    assert codes(HEADER + line) == ["LD101"]
    assert codes(HEADER + line.replace(":\n", ":  # noqa\n", 1)) == []
    assert codes(HEADER + line.replace(":\n", ":  # noqa: LD101\n", 1)) == []
    assert codes(HEADER + line.replace(":\n", ":  # NOQA:LD1\n", 1)) == []
    assert codes(HEADER + line.replace(":\n", ":  # noqa: E501\n", 1)) == ["LD101"]
    assert codes(HEADER + 'x = "# noqa"\n' + line) == ["LD101"]


def test_select_and_ignore_prefixes() -> None:
    source = HEADER + "for b in DataLoader(ds, num_workers=2, collate_fn=lambda b: b):\n    pass\n"
    assert codes(source) == ["LD101", "LD102"]
    assert codes(source, select=["LD102"]) == ["LD102"]
    assert codes(source, select=["LD10"], ignore=["LD101"]) == ["LD102"]
    assert codes(source, ignore=["LD"]) == []


def test_syntax_error_is_a_finding_not_a_traceback() -> None:
    findings = check_source("def broken(:\n    pass\n", "bad.py", select=["LD101"])
    assert [(f.code, f.line) for f in findings] == [("LD000", 1)]
    assert findings[0].message.startswith("cannot parse:")
    assert check_source("def broken(:\n", ignore=["LD000"]) == []


def test_columns_count_characters_not_bytes() -> None:
    source = (
        HEADER
        + "for b in DataLoader('é', num_workers=2, persistent_workers=0, collate_fn=lambda b: b):\n    pass\n"
    )
    lambda_finding = next(f for f in check_source(source) if f.code == "LD102")
    assert lambda_finding.col == source.splitlines()[2].index("lambda") + 1


def test_report_round_trips_through_json() -> None:
    finding = LintFinding("a.py", 3, 5, "LD105", "message", "fix")
    notebook = LintFinding("n.ipynb", 1, 1, "LD101", "m", "f", cell=2)
    report = LintReport(findings=[finding, notebook])
    data = report.to_dict()
    assert data["schema"] == 1 and set(data["findings"][0]) == {
        "path",
        "line",
        "col",
        "code",
        "severity",
        "message",
        "fix",
    }
    assert LintReport.from_dict(data).findings == [finding, notebook]
    with pytest.raises(ValueError):
        LintReport.from_dict({"schema": 99})


@pytest.mark.slow
def test_linting_does_not_import_torch() -> None:
    code = (
        "import sys, loaderdoctor\n"
        "before = set(sys.modules)\n"
        "import loaderdoctor.lint, loaderdoctor.lint.fix, loaderdoctor.report.lint, loaderdoctor.cli.lint\n"
        "loaderdoctor.lint.check_source('import torch\\nx = 1\\n')\n"
        "new = set(sys.modules) - before\n"
        "bad = sorted(m for m in new if m.split('.')[0] in ('torch', 'numpy', 'rich'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _numpy_state_word(worker_id: int) -> None:
    import numpy as np

    info = torch.utils.data.get_worker_info()
    assert info is not None
    info.dataset.word = int(np.random.get_state()[1][0]) + worker_id


class _StateWords(torch.utils.data.Dataset[int]):
    """What LD110's expression evaluates to in each worker, in each epoch."""

    word = -1

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> int:
        return self.word


@pytest.mark.slow
def test_ld110_premise_numpy_state_word_is_the_same_every_epoch_in_real_workers() -> None:
    pytest.importorskip("numpy")
    loader = torch.utils.data.DataLoader(
        _StateWords(), num_workers=2, batch_size=None, worker_init_fn=_numpy_state_word, timeout=60
    )
    epochs = [sorted(int(word) for word in loader) for _ in range(3)]
    assert epochs == [[2147483648, 2147483649]] * 3
