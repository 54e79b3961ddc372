"""FAILED.json as one typed record: why a run published nothing, and the summary.json it
would have published. The publish step writes it (transforms/publish.py); the launcher
raises it (transforms/outcome.py's RunFailed) and the readers of an output read it
(image_tfrecords/output.py, report.html's page: core/report/report_page.py).

Free of Beam and TensorFlow: readers import it.
"""

from __future__ import annotations

import json

import pydantic

from image_tfrecords.core.records.summary import Summary


class Failure(pydantic.BaseModel):
    """Why a run published nothing, and where what it wrote can be read: FAILED.json."""

    model_config = pydantic.ConfigDict(frozen=True)

    problems: tuple[str, ...]
    dead_letters: tuple[str, ...]  # paths of the run's errors-*.jsonl (none: no dead letter)
    record: str = pydantic.Field(exclude=True)  # path of FAILED.json, which holds the rest
    summary: Summary  # the summary.json the run would have published

    def line(self) -> str:
        """One line for the console: the problems, then where to look."""
        letters = ", ".join(self.dead_letters) or "none were written"
        return (
            f"{'; '.join(self.problems)}. Nothing was published (the output is as it "
            f"was); dead letters: {letters}; the run's summary: {self.record}"
        )

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str | bytes, record: str) -> Failure:
        """The Failure that FAILED.json at `record` holds."""
        return cls.model_validate({**json.loads(text), "record": record})
