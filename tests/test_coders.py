"""Every PCollection's coder is declared, not inferred, and the same on every Beam.

Beam encodes the elements between steps with the coder of their declared type, and
infers one where nothing is declared; that inference moved under the pipeline (Beam 2.78
began to read string annotations, and a 64-bit hash band declared `int` became a VarInt,
which failed every run: issue 64). transforms/element_types.py says how the steps
declare theirs.
"""

import ast
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.typehints import Any

from image_tfrecords.core.inputs.sources import find_manifests
from image_tfrecords.core.records.chunks import RowChunk
from image_tfrecords.core.records.records import ExampleRef, ShardExamples
from image_tfrecords.core.records.summary import RunInfo, RunOptions
from image_tfrecords.pipeline import graph
from image_tfrecords.pipeline.options import ConvertOptions
from image_tfrecords.transforms.near_duplicates import _PackByBand, band_masks

ROOT = Path(__file__).resolve().parents[1]
# tf.Transform's own steps declare what they declare.
NOT_OURS = ("AnalyzeLabels", "WriteTransformFn")
# A Batch's items, of whichever record the caller writes (a Duplicate, a NearDuplicate):
# one ParDo, fused with the next, reads them. The files written, whose tf.Transform part
# declares nothing: AsPaths, next, makes each a path, declared (the Java runners' side
# inputs hold no None, and a nullable coder's gave them one).
UNDECLARED = {"Duplicates/Write/Items", "Duplicates/WriteNear/Items", "Publish/AllWritten"}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """The whole graph, built (not run), with every optional part: Beam's construction-time
    type check compares each step's declared input with what it is given."""
    folder = tmp_path_factory.mktemp("graph")
    (folder / "manifest.csv").write_text("split,image_uri,label\ntrain,a.jpg,cat\n")
    options = PipelineOptions(["--output_dir", str(folder / "out"), "--dedupe", "near"])
    convert = options.view_as(ConvertOptions)
    p = beam.Pipeline(options=options)
    graph.build(
        p,
        convert,
        graph.JobInputs(
            convert.run_settings(),
            tuple(RowChunk(source) for source in find_manifests([str(folder / "manifest.csv")])),
            RunInfo(
                options=RunOptions(compression="none", label_mode="single", unseen_label="error")
            ),
        ),
        graph.JobFolders(str(folder / "out" / ".tmp-run"), str(folder / "tft")),
    )
    return p


def applied_steps(p: beam.Pipeline) -> list:
    found = []

    class Steps(beam.pipeline.PipelineVisitor):
        def visit_transform(self, applied):
            found.append(applied)

        def enter_composite_transform(self, applied):
            found.append(applied)

    p.visit(Steps())
    return [step for step in found if step.full_label and not step.full_label.startswith(NOT_OURS)]


def beams_own_inside(step) -> bool:
    """A part of one of Beam's composites (CombineGlobally's KeyWithVoid, Create's
    decode): the composite's output is what the step declares."""
    parent = step.parent.transform if step.parent else None
    return parent is not None and type(parent).__module__.startswith("apache_beam.")


def test_every_step_of_ours_declares_its_output_type(pipeline):
    undeclared = sorted(
        step.full_label
        for step in applied_steps(pipeline)
        if not beams_own_inside(step)
        for output in step.outputs.values()
        if isinstance(output, beam.PCollection) and output.element_type in (None, Any)
    )
    assert undeclared == sorted(UNDECLARED)


def test_every_grouping_key_has_a_deterministic_coder(pipeline):
    """Equal keys must encode to equal bytes, or a group splits (Beam checks only where
    a runner asks)."""
    groupings = [
        step for step in applied_steps(pipeline) if isinstance(step.transform, beam.GroupByKey)
    ]
    assert len(groupings) > 10  # the walk found the graph's groupings
    for step in groupings:
        (grouped,) = step.inputs
        key_coder = coders.registry.get_coder(grouped.element_type).key_coder()
        # Beam's own: a key of None (a global combine) is made deterministic by Beam.
        assert key_coder.as_deterministic_coder(step.full_label).is_deterministic(), step.full_label


def test_hash_band_keys_use_the_whole_64_bits_within_their_declared_coder():
    """The bug of issue 64: a band of the top bits of a pHash reaches 2**64 - 1, and the
    key's declared coder (a VarInt per int) holds signed 64-bit values only."""
    masks = band_masks(10)
    ref = ExampleRef("train", 0, 0, "m.csv", 2, "a.jpg", ("cat",), (1 << 64) - 1, None)
    fn = _PackByBand(masks)
    fn.start_bundle()
    packs = list(fn.process(ShardExamples("train", 0, (("ab" * 32, ref),))))
    packs += [value.value for value in fn.finish_bundle()]
    assert len(packs) == len(masks)
    declared = fn.default_type_hints().simple_output_type("PackByBand")
    coder = coders.registry.get_coder(declared)
    for pack in packs:
        assert coder.decode(coder.encode(pack)) == pack


def test_the_transforms_keep_their_annotations_as_objects():
    """A string annotation is read by some Beams (2.78 on) and not others: the graph's
    types would differ between releases."""
    modules = [*sorted((ROOT / "transforms").glob("*.py")), ROOT / "pipeline" / "graph.py"]
    postponed = [
        path.relative_to(ROOT).as_posix()
        for path in modules
        if any(
            isinstance(node, ast.ImportFrom)
            and node.module == "__future__"
            and any(alias.name == "annotations" for alias in node.names)
            for node in ast.parse(path.read_text()).body
        )
    ]
    assert postponed == []
