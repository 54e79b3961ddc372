"""Trains a small CNN with Keras straight from an image-tfrecords output (single labels):

    make demo && .venv/bin/python examples/train_keras.py demo-output

`image_tfrecords.load(..., as_supervised=True)` yields (image, label id) batches that
`keras.Model.fit` takes as they are; the number of classes comes from the output. Ends
with the VALIDATION split's accuracy next to chance (1 / classes).
"""

from __future__ import annotations

import argparse

# First: importing the readers loads TensorFlow with its start-up lines left out (the
# command line's console filter, core/launcher/console.py), which Keras would print
# loading it first.
from image_tfrecords import Output, load  # isort: skip
import keras

IMAGE_SIZE = 64


def build_model(num_classes: int) -> keras.Model:
    """Three conv blocks and global pooling: small enough for a CPU and ~30 images."""
    return keras.Sequential(
        [
            keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3)),
            keras.layers.Rescaling(1 / 255),  # load() resizes to float32 in [0, 255]
            keras.layers.RandomFlip("horizontal"),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(num_classes),
        ]
    )


def main(argv: list[str] | None = None) -> float:
    """Returns the validation accuracy."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("output_dir", help="an image-tfrecords output with single labels")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(args.seed)

    output = Output.read(args.output_dir)
    if output.label_mode != "single":
        parser.error(
            f"{args.output_dir} has {output.label_mode!r} labels; this example "
            "trains a single-label classifier"
        )
    train, validation = (
        load(
            args.output_dir,
            split,
            as_supervised=True,
            batch_size=args.batch_size,
            image_size=IMAGE_SIZE,
            seed=args.seed,
        )
        for split in ("train", "validation")
    )
    model = build_model(output.num_classes)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    # load() shuffles the train split itself (Keras's own shuffle does not apply to a
    # tf.data.Dataset, and warns that it does not).
    model.fit(train, validation_data=validation, epochs=args.epochs, verbose=2, shuffle=False)
    _, accuracy = model.evaluate(validation, verbose=0)
    examples = output.summary.splits["validation"].examples
    print(
        f"validation accuracy {accuracy:.3f} on {examples} examples "
        f"(chance {1 / output.num_classes:.3f})"
    )
    return accuracy


if __name__ == "__main__":
    main()
