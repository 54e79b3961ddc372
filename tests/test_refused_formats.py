"""Formats people hold that are refused by name before the job (core/inputs/via.py,
list_file.py: RefusedFormat),
not read as a manifest whose every row would be a dead letter pointing elsewhere."""

import json
from pathlib import Path

import pytest

from image_tfrecords.core.inputs.rows import ManifestError, RowRules
from image_tfrecords.core.inputs.sources import check_sources, find_manifests
from image_tfrecords.pipeline import run

VIA_REGIONS = [
    {
        "shape_attributes": {"name": "rect", "x": 10, "y": 12, "width": 30, "height": 20},
        "region_attributes": {"name": "cat"},
    }
]
# As VIA 2.0 writes them (its "Save project", "Export Annotations (as json)" and "(as csv)").
VIA = {
    "project.json": json.dumps(
        {
            "_via_settings": {"ui": {}, "core": {}, "project": {"name": "via_project"}},
            "_via_img_metadata": {
                "cat.jpg12345": {"filename": "cat.jpg", "size": 12345, "regions": VIA_REGIONS}
            },
            "_via_attributes": {"region": {}, "file": {}},
        }
    ),
    "via_export_json.json": json.dumps(
        {
            "cat.jpg12345": {
                "filename": "cat.jpg",
                "size": 12345,
                "regions": VIA_REGIONS,
                "file_attributes": {},
            }
        }
    ),
    "via_export_csv.csv": (
        "filename,file_size,file_attributes,region_count,region_id,region_shape_attributes,"
        "region_attributes\n"
        'cat.jpg,12345,"{}",1,0,"{""name"":""rect"",""x"":10,""y"":12,""width"":30,'
        '""height"":20}","{""name"":""cat""}"\n'
    ),
}
# Oxford-IIIT Pet's annotations/list.txt, its first lines.
PET_LIST = (
    "#Image CLASS-ID SPECIES BREED ID\n"
    "#ID: 1:37 Class ids\n"
    "#SPECIES: 1:Cat 2:Dog\n"
    "#BREED ID: 1-25:Cat 1:12:Dog\n"
    "#All images with 1st letter as captial are cat images\n"
    "#images with small first letter are dog images\n"
    "Abyssinian_100 1 1 1\n"
    "Abyssinian_101 1 1 1\n"
    "american_bulldog_100 2 2 1\n"
)


@pytest.mark.parametrize("name", sorted(VIA))
def test_a_via_project_or_export_is_refused_naming_via_and_its_coco_export(name, tmp_path, capsys):
    path = tmp_path / name
    path.write_text(VIA[name])
    (source,) = find_manifests([str(path)])
    assert source.format == "via"
    with pytest.raises(ManifestError, match="VGG Image Annotator .* Export Annotations \\(COCO"):
        check_sources([source], RowRules(label_mode="detection"))
    code = run.main(["--manifest", str(path), "--output_dir", str(tmp_path / "out")])
    assert code == run.EXIT_USAGE
    assert "is a VGG Image Annotator (VIA) project or export, which is not read" in (
        capsys.readouterr().err
    )


def test_a_space_separated_list_file_is_refused_saying_what_to_write_instead(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text(PET_LIST)
    (source,) = find_manifests([str(path)])
    assert source.format == "list_file"
    with pytest.raises(ManifestError, match="Oxford-IIIT Pet's list.txt.*write a CSV manifest"):
        check_sources([source], RowRules())
    # A CSV manifest named .txt, and KITTI's and YOLO's label lines, are not list files.
    (tmp_path / "m.txt").write_text("train,a.jpg,cat\ntrain,b.jpg,dog\n")
    assert [s.format for s in find_manifests([str(tmp_path / "m.txt")])] == ["csv"]


PUBLIC = Path(__file__).parent / "data" / "public"
# What each public VIA file is (tests/data/public/README.md says where it is from).
PUBLIC_VIA = {
    # VIA 1's JSON export, from VIA's own tests: `regions` an object keyed "0", "1"...
    "via1_unit_test_annotation2.json": "{",
    # VIA 1's CSV export, from VIA's own tests: its header starts `#filename`.
    "via1_unit_test_annotation1.csv": "#filename,file_size,",
    # VIA 2's CSV export of VIA's face track demo, its first 10 rows.
    "via2_sherlock_ep01_tracks_FRCNN.csv": "filename,file_size,",
    # A VIA 2 project as its "Save project" writes it.
    "via_project_video_2020-05-01_02700.json": '{"_via_settings":',
    # A VIA 2 JSON export (Mask R-CNN's via_region_data.json form), indented.
    "unet_via_export.json": '{\n    "1.jpeg45602": {',
}
VIA_REFUSAL = (
    "is a VGG Image Annotator (VIA) project or export, which is not read: export it from "
    "VIA as COCO (Annotation > Export Annotations (COCO format)) and pass that JSON with "
    "--label_mode detection"
)


@pytest.mark.parametrize("name", sorted(PUBLIC_VIA))
def test_public_via_files_are_refused_before_the_job_naming_via_and_its_coco_export(
    name, tmp_path, capsys
):
    """VIA files people hold, VIA 1's and 2's, exports and a saved project: each is
    refused up front (exit 2, nothing written), the message naming VIA and what to pass
    instead. VIA 1's CSV export, its header written `#filename`, was read as a CSV manifest
    and refused for naming no image column, pointing at --uri_column."""
    path = tmp_path / name
    path.write_bytes((PUBLIC / "via" / name).read_bytes())
    assert path.read_text().startswith(PUBLIC_VIA[name])
    output = tmp_path / "out"
    argv = ["--manifest", str(path), "--label_mode", "detection", "--output_dir", str(output)]
    assert run.main(argv) == run.EXIT_USAGE == 2
    assert f"{path} {VIA_REFUSAL}" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize("name", ["oxford_pet_list.txt", "sample_pets_list.txt"])
def test_public_pet_list_files_are_refused_before_the_job_saying_what_to_write(
    name, tmp_path, capsys
):
    """Oxford-IIIT Pet's annotations/list.txt as two public repositories hold it: one with
    its six `#` comment lines (`#Image CLASS-ID SPECIES BREED ID`...) over 100 of its lines,
    one without them (its first 12 lines). Refused up front (exit 2, nothing written),
    saying to write a CSV manifest or lay the images out in class folders."""
    path = tmp_path / "list.txt"
    path.write_bytes((PUBLIC / "list_files" / name).read_bytes())
    output = tmp_path / "out"
    assert run.main(["--manifest", str(path), "--output_dir", str(output)]) == run.EXIT_USAGE
    assert (
        f"{path} is a space-separated list file (as Oxford-IIIT Pet's list.txt), which is "
        "not read: its lines name images without their folder or suffix and give classes "
        "as ids; write a CSV manifest (split,image_uri,label) from it, or lay the images "
        "out in class folders for --image_folder"
    ) in capsys.readouterr().err
    assert not output.exists()
