"""``release.json`` through its model (`near_dedup_core.formats.release`): what the release
writes reads back as the same record, ``contamination`` appears only when the mixture used a
contamination report, and a record that does not fit the model is one line naming the file.
(The Dagster release writes and checks real records: tests/test_assets.py,
tests/test_contamination_assets.py.)"""

from __future__ import annotations

import orjson
import pytest

from near_dedup_core.errors import NearDedupError
from near_dedup_core.formats.release import (
    ReleasedContamination,
    ReleasedInput,
    ReleasedMixture,
    ReleaseRecord,
    read_release,
)
from near_dedup_core.fsutil import write_json

SHA = "ab" * 32


def record(contamination: bool) -> ReleaseRecord:
    return ReleaseRecord(
        format="near-dedup-release", format_version=2, day="2026-11-25", kind="cpt",
        near_dedup=False,
        inputs=[ReleasedInput(package_id="cpt-v1", manifest_sha256=SHA, records=49,
                              path="2026-11-25/cpt-v1")],
        index=None, report=None,
        mixture=ReleasedMixture(name="cpt-mix-2026-11-25", path="cpt-mix-2026-11-25",
                                manifest_sha256=SHA, counts={"selected": 40}),
        contamination=ReleasedContamination(path="contamination-cpt-2026-11-25",
                                            manifest_sha256=SHA, counts={"pairs": 1})
        if contamination else None)


@pytest.mark.parametrize("contamination", [False, True])
def test_a_written_record_reads_back_the_same(tmp_path, contamination):
    written = record(contamination)
    write_json(tmp_path / "release.json", written.to_json())
    raw = orjson.loads((tmp_path / "release.json").read_bytes())
    assert ("contamination" in raw) == contamination
    assert raw["index"] is None and raw["report"] is None  # nulls are written
    assert read_release(tmp_path) == written


@pytest.mark.parametrize(("change", "problem"), [
    ({"format_version": 3}, "format_version"),
    ({"kind": "pretrain"}, "kind"),
    ({"inputs": []}, "inputs"),
    ({"extra": 1}, "extra"),
])
def test_a_record_that_does_not_fit_is_one_line_naming_it(tmp_path, change, problem):
    raw = {**record(False).to_json(), **change}
    write_json(tmp_path / "release.json", raw)
    with pytest.raises(NearDedupError) as err:
        read_release(tmp_path)
    message = str(err.value)
    assert "\n" not in message and problem in message
    assert message.startswith(f"release record {tmp_path}: release.json")
