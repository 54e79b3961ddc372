"""What Beam is told of the elements between the pipeline's steps.

Beam encodes each PCollection with the coder of its element type, which it takes from
the step's type hints: a DoFn's process annotations, a Map function's, or
with_output_types. Where nothing is declared it infers, and that inference changes
between releases (2.78 began to read string annotations: a 64-bit hash band declared
`int` became a VarInt, which holds signed values only, and every run failed). So every
step declares its output (tests/test_coders.py walks the graph and checks), the
transforms' modules keep their annotations as objects rather than strings (no
`from __future__ import annotations`), and 64-bit unsigned values travel as signed
ones or inside records.
"""

from typing import Any, Literal

import apache_beam as beam


def tagged(tag: str, value_type: Any) -> Any:
    """A tagged output's type in a DoFn's return annotation: TaggedOutput[Literal[tag],
    value_type] on the Beams that type tagged outputs (2.72 on), where the tag's
    PCollection gets value_type's coder. Before, the annotation is the main output's, and
    Beam checks every output against it, tagged ones too: there it is Any, which leaves
    the main output's type Any (as those Beams saw it); value_type there made a step's
    main output a Union its GroupByKey refused (tests/compat/, Beam 2.69)."""
    if getattr(beam.pvalue.TaggedOutput, "__parameters__", ()):
        return beam.pvalue.TaggedOutput[Literal[tag], value_type]
    return Any
