"""The check a finished run must pass before anything is published."""

import json

from image_tfrecords.core.records.dead_letters import DeadLetter
from image_tfrecords.core.records.failure import Failure
from image_tfrecords.core.records.summary import ErrorsInfo, RunOptions, SplitInfo, Summary
from image_tfrecords.transforms.outcome import PublishRules, outcome_problems, unwritten_labels


def summary(
    vocabulary,
    train_labels,
    rows_read=10,
    examples=None,
    dead=0,
    accounted=True,
    label_order="frequency",
    by_reason=None,
):
    examples = sum(train_labels.values()) if examples is None else examples
    return Summary(
        options=RunOptions(label_order=label_order),
        rows_read=rows_read,
        rows_in_examples=examples,
        rows_dead_lettered=dead,
        examples_written=examples,
        accounted=accounted,
        error_fraction=dead / rows_read if rows_read else 0.0,
        vocabulary={"label": vocabulary},
        splits={"train": SplitInfo(labels=train_labels)},
        errors=ErrorsInfo(by_reason=by_reason or ({"missing_label": dead} if dead else {})),
    )


def test_a_good_run_has_no_problem():
    assert (
        outcome_problems(
            summary(["cat", "dog"], {"cat": 6, "dog": 4}), {"cat": 6, "dog": 4}, PublishRules(0.0)
        )
        == []
    )


def test_labels_whose_train_rows_were_all_dead_lettered_are_named_with_their_rows():
    run = summary(["cat", "dog", "fish", "owl"], {"cat": 7}, dead=3)
    problems = outcome_problems(run, {"cat": 7, "dog": 2, "fish": 1, "owl": 0}, PublishRules(0.5))
    assert problems == [
        "labels without a written TRAIN example would get ids: 'dog' (2 TRAIN rows, all "
        "dead-lettered), 'fish' (1 TRAIN row, all dead-lettered), 'owl' (0 TRAIN rows, all "
        "dead-lettered); fix those rows, pin the ids with --vocabulary FILE|OUTPUT_DIR, or "
        "number the labels by --label_order sorted"
    ]
    # Pinned by the user, a label without examples keeps its id: no problem.
    assert outcome_problems(run, {"cat": 7, "dog": 2}, PublishRules(0.5, "v.txt")) == []


def test_sorted_ids_keep_a_label_whose_train_rows_were_all_dead_lettered():
    # Its id depends only on the set of labels the rows give, not on their images.
    run = summary(["cat", "dog"], {"cat": 7}, dead=2, label_order="sorted")
    assert outcome_problems(run, {"cat": 7, "dog": 2}, PublishRules(0.5)) == []


def test_unwritten_labels_keep_the_vocabulary_order_and_ignore_unseen_ones():
    # "bird" has examples (the OOV bucket) but no id: not the check's business.
    assert unwritten_labels(
        ["dog", "cat", "fish"], {"cat": 2, "bird": 1, "fish": 0}, {"dog": 3, "cat": 2, "fish": 1}
    ) == {"dog": 3, "fish": 1}


def test_no_example_too_many_dead_letters_and_lost_rows_each_fail_the_run():
    empty = summary(["cat"], {}, examples=0, dead=10, by_reason={"file_not_found": 10})
    assert outcome_problems(empty, {"cat": 10}, PublishRules(1.0)) == [
        "no example was written: 10 of the 10 rows read were dead-lettered (file_not_found 10)"
    ]
    over = summary(["cat"], {"cat": 8}, dead=2)
    assert outcome_problems(over, {"cat": 10}, PublishRules(0.2)) == []
    assert outcome_problems(over, {"cat": 10}, PublishRules(0.1)) == [
        "20.0% of rows were dead-lettered, more than --max_error_fraction 10.0%"
    ]
    lost = summary(["cat"], {"cat": 8}, dead=1, accounted=False)
    assert outcome_problems(lost, {"cat": 10}, PublishRules(0.5)) == [
        "rows read (10) != rows in examples written (8) + rows dead-lettered (1) + rows "
        "discarded (0): rows were lost"
    ]


def test_the_failure_line_says_what_failed_that_nothing_was_published_and_where_to_look():
    failure = Failure(
        problems=("no example was written", "rows were lost"),
        dead_letters=("out/.tmp-1/staged/errors-00000-of-00001.jsonl",),
        record="out/.tmp-1/staged/FAILED.json",
        summary=summary(["cat"], {}, examples=0, dead=10),
    )
    assert failure.line() == (
        "no example was written; rows were lost. Nothing was published (the output is as "
        "it was); dead letters: out/.tmp-1/staged/errors-00000-of-00001.jsonl; the run's "
        "summary: out/.tmp-1/staged/FAILED.json"
    )
    assert (
        "dead letters: none were written" in failure.model_copy(update={"dead_letters": ()}).line()
    )


def test_failed_json_holds_the_problems_dead_letters_and_summary_but_not_its_own_path():
    failure = Failure(
        problems=("no example was written",),
        dead_letters=(),
        record="out/.tmp-1/staged/FAILED.json",
        summary=summary(["cat"], {}, examples=0, dead=10),
    )
    text = failure.to_json()
    assert sorted(json.loads(text)) == ["dead_letters", "problems", "summary"]
    assert Failure.from_json(text, "elsewhere/FAILED.json") == failure.model_copy(
        update={"record": "elsewhere/FAILED.json"}
    )


def test_no_example_for_want_of_a_train_row_says_to_give_the_vocabulary():
    every_row_test = summary([], {}, examples=0, dead=10, by_reason={"unseen_label": 10})
    (problem,) = outcome_problems(every_row_test, {}, PublishRules(1.0))
    assert problem.startswith(
        "no example was written: 10 of the 10 rows read were dead-lettered (unseen_label 10); "
        "there is no TRAIN row"
    )
    assert "--vocabulary OUTPUT_DIR" in problem
    # With TRAIN rows, or with the ids pinned, that is not why.
    for train_rows, rules in (({"cat": 3}, PublishRules(1.0)), ({}, PublishRules(1.0, "v.txt"))):
        assert outcome_problems(every_row_test, train_rows, rules) == [
            "no example was written: 10 of the 10 rows read were dead-lettered (unseen_label 10)"
        ]


def test_no_example_because_every_row_was_rejected_leads_with_why_not_with_the_vocabulary():
    """Seen on 5 of 17 public exports: rows dead-lettered as they were read (so no TRAIN
    row reached the ids) were blamed on a missing --vocabulary."""
    rejected = summary(
        [], {}, examples=0, dead=12, rows_read=12, by_reason={"invalid_size": 9, "missing_label": 3}
    )
    first = DeadLetter("train.json", 1, "{}", "a.jpg", "train", "invalid_size", "found None x None")
    assert outcome_problems(rejected, {}, PublishRules(1.0), first) == [
        "no example was written: 12 of the 12 rows read were dead-lettered (invalid_size 9, "
        "missing_label 3), e.g. train.json row 1: found None x None"
    ]
    assert outcome_problems(summary([], {}, rows_read=0, examples=0), {}, PublishRules(1.0)) == [
        "no example was written: no row was read"
    ]
