"""Shapes real stacks give ``loaderdoctor run``, without the stacks: generic
subclasses of the swapped DataLoader, a subclass whose ``__init__`` never reaches torch's
(torchdata's StatefulDataLoader), a stream culprit's key learnt after its incident was written,
and the names a stack's dataset or exception carries."""

from __future__ import annotations

import gc
import sys
import typing
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch.utils.data

from loaderdoctor.forensics import Evidence, diagnose
from loaderdoctor.forensics.incident import Incident
from loaderdoctor.forensics.verdict_text import format_subject
from loaderdoctor.report.html.run import format_html
from loaderdoctor.report.run_text import format_where
from loaderdoctor.runner import core, patch, protocol, subclasses
from loaderdoctor.runner.model import run_status
from loaderdoctor.supervise.exception_facts import exception_facts
from loaderdoctor.supervise.parent import collect
from loaderdoctor.supervise.parent.incidents import FollowUp
from loaderdoctor.supervise.samples import sample_file

T = TypeVar("T")


def test_the_swapped_dataloader_is_generic_as_torchs_is() -> None:
    alias = patch.RunDataLoader[int]
    assert typing.get_origin(alias) is patch.RunDataLoader
    assert typing.get_args(alias) == (int,)

    class Stateful(patch.RunDataLoader[T]):  # torchdata's `class StatefulDataLoader(DataLoader[T])`
        pass

    assert typing.get_origin(Stateful[str]) is Stateful
    assert issubclass(Stateful, torch.utils.data.DataLoader)
    assert Stateful.__parameters__ == (T,)


def test_the_supervised_stateful_class_is_generic_as_the_users_is() -> None:
    pytest.importorskip("torchdata", reason="torchdata is an extra (the eco extra has it)")
    from torchdata.stateful_dataloader import StatefulDataLoader

    from loaderdoctor.supervise.stateful import SupervisedStateful

    class Tagged(StatefulDataLoader[T]):
        pass

    for user_class, parameters in (
        (StatefulDataLoader, StatefulDataLoader.__parameters__),
        (Tagged, (T,)),
    ):
        supervised = patch._supervised_stateful(user_class)
        assert supervised is not None
        assert issubclass(supervised, SupervisedStateful)
        assert issubclass(supervised, user_class)
        assert supervised.__parameters__ == parameters
        assert typing.get_args(supervised[list[torch.Tensor]]) == (list[torch.Tensor],)


def merge(report_dir: Path, returncode: int = 0) -> Any:
    return core.merge(
        report_dir,
        command=["python", "train.py"],
        returncode=returncode,
        started_wall=0.0,
        duration_s=1.0,
        memory=None,
        interrupted=False,
    )


class NeverCallsTorchInit(patch.RunDataLoader[int]):
    """As torchdata's StatefulDataLoader: sets torch's attributes itself, never calls __init__."""

    def __init__(self) -> None:
        self._DataLoader__initialized = True


def test_a_subclass_that_never_reaches_torchs_init_is_named_with_its_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(protocol.RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(subclasses, "_unsupervised", {})
    Path(protocol.incidents_dir(tmp_path)).mkdir()
    loader = NeverCallsTorchInit()
    line = sys._getframe().f_lineno - 1  # the line above
    del loader
    gc.collect()
    report = merge(tmp_path)
    site = f"{Path(__file__).relative_to(Path.cwd())}:{line}"
    reason = subclasses.unsupervised_reason(NeverCallsTorchInit)
    assert [(u.loader, u.site, u.count) for u in report.unsupervised_loaders] == [
        ("NeverCallsTorchInit", site, 1)
    ]
    assert report.notes == [f"NeverCallsTorchInit at {site} ran unsupervised: {reason}"]
    assert reason.startswith(
        "its __init__ (test_run_stacks_units.NeverCallsTorchInit) never calls torch's "
        "DataLoader.__init__"
    )


def test_no_loader_note_says_what_failed(tmp_path: Path) -> None:
    directory = protocol.incidents_dir(tmp_path)
    Path(directory).mkdir()
    assert merge(tmp_path, returncode=1).notes == [
        "no supervised DataLoader was created: no process of the command imported torch under "
        "loaderdoctor (it built none, or its Python ran without PYTHONPATH (python -I / -E) or "
        "without loaderdoctor installed)"
    ]
    state = {"pid": 4000, "image": 0, "started": 1.0, "rank": None, "created": 0, "loaders": 0}
    protocol.write_json(protocol.state_path(directory, 4000, 0), state)
    assert merge(tmp_path, returncode=1).notes == [
        "no supervised DataLoader was created: the command imported torch (DataLoader replaced "
        "in 1 process image(s)) and exited with code 1 before it built one: its own error, above "
        "the summary, says what failed"
    ]
    failed = "TypeError: Parameters to generic types must be types."
    protocol.write_json(protocol.state_path(directory, 4000, 0), {**state, "uncaught": failed})
    assert merge(tmp_path, returncode=1).notes == [
        "no supervised DataLoader was created: the command imported torch (DataLoader replaced "
        f"in 1 process image(s)) and exited with code 1 before it built one: {failed} (its "
        "traceback is above the summary)"
    ]


def test_a_stream_culprits_key_learnt_later_reaches_the_report(tmp_path: Path) -> None:
    directory = protocol.incidents_dir(tmp_path)
    Path(directory).mkdir()
    incident = {"cause": "killed-by-signal", "action": "skipped", "worker_id": 2}
    first = {**incident, "position": 7, "key": None, "evidence": ["died"]}
    line = {"time": 1.0, "pid": 4000, "image": 0, "rank": None}
    protocol.append_incident(directory, 4000, {**line, "id": 3, "incident": first})
    learnt = FollowUp(3, ("item #7 has key 's2-0007'",), "s2-0007")
    protocol.append_incident(directory, 4000, {**line, "follow_up": learnt.to_dict()})
    other_image = FollowUp(3, ("not this one",), "elsewhere")
    protocol.append_incident(
        directory, 4000, {**line, "image": 1, "follow_up": other_image.to_dict()}
    )
    (merged,) = merge(tmp_path).incidents
    assert (merged.position, merged.key) == (7, "s2-0007")
    assert merged.evidence == ["died", "item #7 has key 's2-0007'"]
    assert format_where(merged) == "worker 2, item #7, key 's2-0007'"
    page = format_html(merge(tmp_path))
    assert '<p class="where">worker 2 · item #7 · key <code>&#x27;s2-0007&#x27;</code>' in page


def test_a_loss_learnt_later_makes_the_run_healed_with_loss(tmp_path: Path) -> None:
    directory = protocol.incidents_dir(tmp_path)
    Path(directory).mkdir()
    first = {"cause": "killed-by-signal", "action": "respawned", "worker_id": 1, "evidence": []}
    line = {"time": 1.0, "pid": 4000, "image": 0, "rank": None}
    protocol.append_incident(directory, 4000, {**line, "id": 3, "incident": first})
    assert run_status(0, merge(tmp_path).incidents, delivered_samples=90) == "healed"
    said = "stream of worker 1 is not replayable: up to 44 items may be duplicated or lost"
    learnt = FollowUp(3, (said,), None, "lost")
    protocol.append_incident(directory, 4000, {**line, "follow_up": learnt.to_dict()})
    (incident,) = merge(tmp_path).incidents
    assert (incident.action, incident.evidence) == ("lost", [said])
    assert run_status(0, [incident], delivered_samples=90) == "healed-with-loss"


def test_format_where_of_a_map_style_incident_is_unchanged() -> None:
    incident = Incident.from_dict(
        dict(cause="sample-error", action="raised", worker_id=1, indices=[37], batch=4)
    )
    assert format_where(incident) == "worker 1, sample 37, batch 4"


class TimmReader:
    def __init__(self, root: str) -> None:
        self.samples = [(f"{root}/{i:04d}/x.png", i) for i in range(4)]


class TimmImageDataset:
    """timm's ImageDataset keeps its files in ``reader.samples`` and answers ``filename(i)``."""

    def __init__(self) -> None:
        self.reader = TimmReader("/images")


class FilenameOnly:
    def filename(self, index: int) -> str:
        return f"{index:04d}/x.png"


class MonaiDataset:
    def __init__(self) -> None:
        self.data = [{"label": 1, "image": f"/scans/{i}.nii.gz"} for i in range(3)]


def test_names_from_timm_and_monai_datasets() -> None:
    assert sample_file(TimmImageDataset(), 2) == "/images/0002/x.png"
    assert sample_file(FilenameOnly(), 3) == "0003/x.png"
    assert sample_file(MonaiDataset(), 1) == "/scans/1.nii.gz"
    # a dict item without a path value names nothing
    no_path = MonaiDataset()
    no_path.data = [{"label": 1, "text": "hello"}]
    assert sample_file(no_path, 0) is None


class UltralyticsShaped(torch.utils.data.Dataset):
    """The shape of Ultralytics' ``BaseDataset`` (YOLO): image paths in ``im_files``, one label
    dict per image in ``labels``, each naming its image again as ``im_file``. Ultralytics itself
    imports OpenCV and needs torchvision, which has no wheel for the CPU torch 2.13 pin."""

    def __init__(self, root: str) -> None:
        self.im_files = [f"{root}/images/train/{i:06d}.jpg" for i in range(8)]
        self.labels = [{"im_file": f, "cls": [0], "bboxes": []} for f in self.im_files]

    def __len__(self) -> int:
        return len(self.im_files)

    def __getitem__(self, index: int) -> dict:
        return self.labels[index]


class OpenMMLabShaped:
    """OpenMMLab's ``BaseDataset`` (mmdet, mmseg, mmpose): ``data_list`` of info dicts."""

    def __init__(self) -> None:
        self.data_list = [{"img_id": i, "img_path": f"/coco/{i:012d}.jpg"} for i in range(3)]


class TorchvisionFlowersShaped:
    """torchvision's Flowers102 and Food101 keep their paths in ``_image_files``."""

    def __init__(self) -> None:
        self._image_files = [Path(f"/flowers/jpg/image_{i:05d}.jpg") for i in range(3)]


def test_names_from_the_file_lists_of_popular_repositories() -> None:
    assert sample_file(UltralyticsShaped("/data/coco8"), 5) == "/data/coco8/images/train/000005.jpg"
    assert sample_file(OpenMMLabShaped(), 2) == "/coco/000000000002.jpg"
    assert sample_file(TorchvisionFlowersShaped(), 1) == "/flowers/jpg/image_00001.jpg"
    # a Subset of one, as a train/val split makes it
    split = torch.utils.data.Subset(UltralyticsShaped("/d"), [7, 3])
    assert sample_file(split, 1) == "/d/images/train/000003.jpg"


def test_the_root_of_a_chained_exception_is_in_the_evidence() -> None:
    try:
        try:
            try:
                b"".decode("ascii") + {}["x"]
            except KeyError as missing:
                raise OSError("image file is truncated") from missing
        except OSError as error:
            raise RuntimeError("applying transform <LoadImaged>") from error
    except RuntimeError as wrapped:
        facts = exception_facts(wrapped)
    assert facts == {"root": "OSError: image file is truncated (from KeyError: 'x')"}
    facts = {"root": "OSError: image file is truncated (3 bytes not processed)"}
    ev = Evidence(kind="exception", worker_id=0, exception_type="RuntimeError")
    ev.exception_message = "RuntimeError: applying transform <LoadImaged>"
    collect.facts_from_tags(ev, {"stage": "fetch", "index": 5, **facts})
    assert diagnose(ev).evidence[:3] == [
        "RuntimeError: raised in Dataset.__getitem__ (or a transform)",
        "worker 0 raised RuntimeError: applying transform <LoadImaged>",
        "root cause: OSError: image file is truncated (3 bytes not processed)",
    ]


def test_a_webdataset_decoding_error_names_its_record() -> None:
    wds = pytest.importorskip("webdataset", reason="the dev extra installs webdataset")
    from webdataset.autodecode import DecodingError

    try:
        try:
            raise ValueError("Expecting value: line 1 column 1 (char 0)")
        except ValueError as error:
            raise DecodingError(url="/shards/shard-0.tar", key="s0-0009", k="json") from error
    except DecodingError as decoding:
        facts = exception_facts(decoding)
    assert wds is not None and facts == {
        "root": "ValueError: Expecting value: line 1 column 1 (char 0)",
        "record_key": "s0-0009",
        "record_url": "/shards/shard-0.tar",
    }
    ev = Evidence(kind="exception", worker_id=0, exception_type="DecodingError")
    ev.exception_message = "webdataset.autodecode.DecodingError"  # its traceback's last line
    collect.facts_from_tags(ev, {"stage": "fetch", "position": 9, **facts})
    diagnosis = diagnose(ev)
    assert format_subject(diagnosis) == "worker 0, item #9 (key 's0-0009', /shards/shard-0.tar)"
    assert (diagnosis.key, diagnosis.sample_file) == ("s0-0009", "/shards/shard-0.tar")
    assert diagnosis.evidence[1:4] == [
        "worker 0 raised DecodingError",
        "root cause: ValueError: Expecting value: line 1 column 1 (char 0)",
        "in flight: item #9 of worker 0's stream (key 's0-0009') (/shards/shard-0.tar), fetch stage",
    ]
