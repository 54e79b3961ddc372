"""`load()`: the shards of one split as a tf.data pipeline built the way TensorFlow's data
performance guide recommends (list and shuffle the shard files, read them with a parallel
`interleave`, parse and decode with parallel `map`, batch, `prefetch`).

The parse spec comes from summary.json, so classification, multi-label and detection
outputs (and any other keys an output lists there) load without naming their keys.
"""

from __future__ import annotations

import tensorflow as tf

from image_tfrecords.core.launcher.console import quiet_console
from image_tfrecords.core.records.feature_keys import CLASS_LABEL, IMAGE, MASKS, SEGMENTATION
from image_tfrecords.output import Output

AUTOTUNE = tf.data.AUTOTUNE


def load(
    output_dir: str,
    split: str = "train",
    *,
    batch_size: int | None = 32,
    image_size: int | tuple[int, int] | None = None,
    shuffle: bool | None = None,
    shuffle_buffer: int = 1024,
    as_supervised: bool = False,
    channels: int = 3,
    seed: int | None = None,
) -> tf.data.Dataset:
    """The examples of `split` (any case; val, valid, eval, dev mean validation) in OUTPUT,
    local or gs://, gzip-compressed or not.

    Elements are dicts of every key in summary.json's `features`: each image key decoded
    to `channels` channels (uint8, or float32 in [0, 255] resized to `image_size`),
    instance masks (`image/object/mask`) to objects x height x width uint8 0s and 1s and
    a segmentation map (`image/segmentation/class/encoded`) to height x width uint8 class
    indices (both resized with the image, nearest neighbour), other list keys as 1-D tensors
    (RaggedTensors once batched), others as scalars.
    With `as_supervised`, elements are `(image, label)` for `keras.Model.fit`: the label
    id, or a multi-hot float vector of `Output.num_classes` with `--label_mode multi`.
    `shuffle` (default: for the train split only) shuffles the shard order and, in a
    buffer of `shuffle_buffer` records, the examples. `batch_size=None` leaves elements
    unbatched; without `image_size`, batched images are ragged.
    """
    with quiet_console():  # TensorFlow's first op probes for a GPU, saying so on stderr
        return _dataset(
            Output.read(output_dir),
            split,
            batch_size,
            image_size,
            shuffle,
            shuffle_buffer,
            as_supervised,
            channels,
            seed,
        )


def _dataset(
    output: Output,
    split: str,
    batch_size: int | None,
    image_size: int | tuple[int, int] | None,
    shuffle: bool | None,
    shuffle_buffer: int,
    as_supervised: bool,
    channels: int,
    seed: int | None,
) -> tf.data.Dataset:
    output_dir = output.directory
    split = output.split_name(split)
    shards = output.shards(split)
    paths = [path for path, _ in shards]
    if not paths:
        raise ValueError(f"split {split!r} of {output_dir} has no examples")
    if as_supervised and CLASS_LABEL not in output.features:
        raise ValueError(
            f"as_supervised needs {CLASS_LABEL}: not in a '{output.label_mode}' output"
        )
    shuffle = split == "train" if shuffle is None else shuffle
    files = tf.data.Dataset.from_tensor_slices(paths)
    if shuffle:
        files = files.shuffle(len(paths), seed=seed)
    records = files.interleave(
        output.shard_format.dataset, num_parallel_calls=AUTOTUNE, deterministic=not shuffle
    )
    # The count summary.json gives, so that len() and Keras know the batches of an epoch
    # (without it Keras warns "Your input ran out of data" at the end of each).
    records = records.apply(
        tf.data.experimental.assert_cardinality(sum(count for _, count in shards))
    )
    if shuffle:
        # Serialized records: a buffer of encoded images, not of decoded pixels.
        records = records.shuffle(shuffle_buffer, seed=seed)
    size = (image_size, image_size) if isinstance(image_size, int) else image_size
    decode = (
        _supervised_decoder(output, size, channels)
        if as_supervised
        else _decoder(output, size, channels)
    )
    examples = records.map(decode, num_parallel_calls=AUTOTUNE, deterministic=not shuffle)
    if batch_size:
        examples = examples.ragged_batch(batch_size)
    return examples.prefetch(AUTOTUNE)


def _decoder(output: Output, size: tuple[int, int] | None, channels: int):
    spec = output.parse_spec()
    image_keys = [key for key in output.image_keys if key != SEGMENTATION]

    def decode(record: tf.Tensor) -> dict[str, tf.Tensor]:
        example = tf.io.parse_single_example(record, spec)
        for key in image_keys:
            example[key] = _decode_image(example[key], size, channels)
        # Masks are at the size of image/encoded, decoded above (and resized with it).
        image_size = tf.shape(example[IMAGE])[:2]
        if SEGMENTATION in example:
            example[SEGMENTATION] = _decode_masks(example[SEGMENTATION][None], size, image_size)[0]
        if MASKS in example:
            example[MASKS] = _decode_masks(example[MASKS], size, image_size)
        return example

    return decode


def _supervised_decoder(output: Output, size: tuple[int, int] | None, channels: int):
    """Parses only the image and the label: the other keys are not needed."""
    spec = {key: value for key, value in output.parse_spec().items() if key in (IMAGE, CLASS_LABEL)}
    multi_label = output.features[CLASS_LABEL].list
    num_classes = output.num_classes

    def decode(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, spec)
        label = example[CLASS_LABEL]
        if multi_label:  # a sum of one-hots: labels are unique per example
            label = tf.reduce_sum(tf.one_hot(label, num_classes), axis=0)
        return _decode_image(example[IMAGE], size, channels), label

    return decode


def _decode_masks(
    encoded: tf.Tensor, size: tuple[int, int] | None, image_size: tf.Tensor
) -> tf.Tensor:
    """One-channel PNGs -> [how many, height, width] uint8. An example without masks
    beside examples with them (none of its objects has one) gives [0, height, width]:
    map_fn cannot stack no PNG of unknown size."""

    def decode() -> tf.Tensor:
        masks = tf.map_fn(
            lambda mask: tf.io.decode_png(mask, channels=1),
            encoded,
            fn_output_signature=tf.TensorSpec([None, None, 1], tf.uint8),
        )
        if size:
            masks = tf.image.resize(masks, size, method="nearest")
        return masks[..., 0]

    def none() -> tf.Tensor:
        return tf.zeros(tf.concat([[0], image_size], axis=0), tf.uint8)

    return tf.cond(tf.size(encoded) > 0, decode, none)


def _decode_image(encoded: tf.Tensor, size: tuple[int, int] | None, channels: int) -> tf.Tensor:
    """JPEG or PNG bytes -> [height, width, channels] uint8, or resized float32."""
    image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
    return tf.image.resize(image, size) if size else image
