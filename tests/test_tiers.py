"""tests/tiers.py: the fast tier has an end-to-end conversion for every input family, each
one a test that exists."""

import ast
from pathlib import Path

from tiers import END_TO_END

from image_tfrecords.core.inputs.sources import FORMATS

TESTS = Path(__file__).parent


def test_every_input_family_has_an_end_to_end_test_in_the_fast_tier():
    assert set(FORMATS) | {"dataframe"} <= set(END_TO_END)
    for family, (file, test) in END_TO_END.items():
        names = {
            node.name
            for node in ast.parse((TESTS / file).read_text()).body
            if isinstance(node, ast.FunctionDef)
        }
        assert test in names, (family, file, test)
