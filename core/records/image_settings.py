"""How images are checked and what is stored of them: the image options as one frozen
record (RunSettings holds it), checked once where it is made."""

from __future__ import annotations

import dataclasses


class InvalidImageSettings(ValueError):
    """ImageSettings' values out of range: `problems`, each (field, what is wrong with it)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field} {wrong}" for field, wrong in problems))
        self.problems = tuple(problems)


@dataclasses.dataclass(frozen=True)
class ImageSettings:
    """How images are checked and what is stored for them."""

    image_format: str = "keep"  # "keep" | "jpeg" | "png"
    max_side: int | None = None  # resize so the longer side <= max_side, aspect kept
    jpeg_quality: int = 95
    max_pixels: int = 89_478_485  # Pillow's default MAX_IMAGE_PIXELS
    # 16-bit greyscale stored as such (a PNG): readers that open it with Pillow and
    # convert("RGB") clip it to white; by default it is stored with 8 bits (its high byte,
    # as tf.io.decode_image reads it), counted as re-encoded for "bit_depth".
    keep_16_bit: bool = False

    def __post_init__(self) -> None:
        # The one check of these limits: the command line reports these problems too,
        # each under its option's name (pipeline/options.py).
        problems = []
        if self.image_format not in ("keep", "jpeg", "png"):
            problems.append(
                ("image_format", f"must be keep, jpeg or png, not {self.image_format!r}")
            )
        if self.max_side is not None and self.max_side < 1:
            problems.append(("max_side", "must be a positive number of pixels"))
        if not 1 <= self.jpeg_quality <= 100:
            problems.append(("jpeg_quality", "must be between 1 and 100"))
        if self.max_pixels < 1:
            problems.append(("max_pixels", "must be positive"))
        if problems:
            raise InvalidImageSettings(problems)
