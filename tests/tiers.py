"""The fast tier: `make test-fast` (pytest -m fast), a few minutes, for every commit; CI
runs every test (`make test`).

A test is in the fast tier when its last recorded time is under FAST_SECONDS (the unit
tests of every module), when it has no recorded time yet (a new test), or when it is the
end-to-end conversion chosen for its input family (END_TO_END). The times are a full
run's, recorded by `make test` in .test-durations.json (setup, call and teardown of each
test) and committed as tests/durations.json when the tiers are reviewed:
`cp .test-durations.json tests/durations.json`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

FAST_SECONDS = 1.0
RECORDED = Path(__file__).parent / "durations.json"

# One end-to-end conversion per input family (core/inputs/sources.py FORMATS' names;
# "dataframe" is the Python API's), each the family's own test of a whole run.
END_TO_END = {
    "csv": ("test_convert_e2e.py", "test_run_succeeds_and_writes_each_split"),
    "vertex_jsonl": ("test_convert_e2e.py", "test_a_vertex_ai_jsonl_import_file_converts"),
    "image_folder": (
        "test_folder.py",
        "test_a_photo_folder_with_val_and_a_stray_file_converts_without_split_classes",
    ),
    "dataframe": ("test_api.py", "test_dataframe_with_relative_paths_and_some_splits_missing"),
    # The Object Detection API's CSV, VOC and COCO in one run.
    "csv_detection": (
        "test_detection.py",
        "test_the_bundled_api_csv_voc_and_coco_samples_convert_in_one_run",
    ),
    "pascal_voc": (
        "test_detection.py",
        "test_the_bundled_api_csv_voc_and_coco_samples_convert_in_one_run",
    ),
    "coco": (
        "test_detection.py",
        "test_the_bundled_api_csv_voc_and_coco_samples_convert_in_one_run",
    ),
    "coco_panoptic": (
        "test_coco_panoptic.py",
        "test_a_panoptic_file_converts_end_to_end_with_masks_and_crowds",
    ),
    "yolo": (
        "test_yolo.py",
        "test_a_yolo_dataset_converts_end_to_end_with_the_object_detection_api_keys",
    ),
    "labelme": ("test_labelme.py", "test_labelme_files_convert_end_to_end"),
    "cvat": ("test_cvat.py", "test_a_cvat_export_converts_end_to_end_beside_a_voc_xml"),
    "label_studio": ("test_label_studio.py", "test_a_label_studio_export_converts_end_to_end"),
    "hf_imagefolder": (
        "test_hf_imagefolder.py",
        "test_pixel_boxes_are_divided_by_the_images_own_size_or_dead_lettered",
    ),
    "kitti": (
        "test_kitti.py",
        "test_a_kitti_dataset_converts_end_to_end_boxes_divided_by_the_images_size",
    ),
    "open_images": (
        "test_open_images.py",
        "test_rows_of_one_image_id_become_one_example_with_its_boxes",
    ),
    "createml": ("test_createml.py", "test_a_createml_export_converts_end_to_end"),
    "retinanet_csv": (
        "test_retinanet_csv.py",
        "test_a_retinanet_export_converts_end_to_end_with_its_declared_ids",
    ),
    # Formats refused by name: their run stops before the job, saying so.
    "via": (
        "test_refused_formats.py",
        "test_a_via_project_or_export_is_refused_naming_via_and_its_coco_export",
    ),
    "list_file": (
        "test_refused_formats.py",
        "test_a_space_separated_list_file_is_refused_saying_what_to_write_instead",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        metavar="PATH",
        help="write each test's seconds (setup, call and teardown) to PATH as JSON",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fast: in the fast tier (tests/tiers.py)")
    # Under pytest-xdist, the controller gets every worker's reports: it alone writes.
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(config.getoption("--record-durations")))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    chosen = {f"{file}::{test}" for file, test in END_TO_END.values()}
    for item in items:
        name = _name(item)
        if name.split("[")[0] in chosen or recorded.get(name, 0.0) < FAST_SECONDS:
            item.add_marker(pytest.mark.fast)


def _name(item: pytest.Item) -> str:
    """The test's id from the tests folder, as `test_cli.py::test_name[parameters]`."""
    return item.nodeid.removeprefix("tests/")


class _Recorder:
    def __init__(self, path: str) -> None:
        self._path = Path(path)
        self._seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._seconds[report.nodeid.removeprefix("tests/")] += report.duration

    def pytest_sessionfinish(self) -> None:
        self._path.write_text(
            json.dumps(
                {name: round(seconds, 2) for name, seconds in sorted(self._seconds.items())},
                indent=0,
            )
            + "\n"
        )
