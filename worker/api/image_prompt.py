"""A chat turn's images on their way into its prompt: decoded by the model's projector, and the prompt they make
held to a sequence's context, with every problem named by the field that sent it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from worker.api.images import ImageInput
from worker.api.problems import InvalidRequest, Problem
from worker.engine import ChatPrompt, ImageUnreadable

if TYPE_CHECKING:
    from worker.engine import Bitmap, ServedModel

log = structlog.get_logger(__name__)  # its lines carry the request id (api/app.py binds it)


def decoded_images(served: ServedModel, images: tuple[ImageInput, ...]) -> list[Bitmap]:
    """Each image's pixels (hashed for the prefix cache); InvalidRequest listing every image that cannot be had."""
    if not served.prompts.reads_images:
        raise InvalidRequest([Problem(image.field, "a model with a projector", f"{image.field}: this worker serves "
                                      "its model for text only; start it with --mmproj PATH (the model's projector, "
                                      "mmproj-*.gguf) to send images") for image in images])
    bitmaps, problems = [], []
    for image in images:
        try:
            bitmaps.append(served.prompts.decode_image(image.data))
        except ImageUnreadable as why:
            problems.append(Problem(image.field, "a decodable image", f"{image.field}: {why} ({image.width} x "
                                    f"{image.height} by its header, {len(image.data)} bytes)"))
    if problems:
        raise InvalidRequest(problems)
    return bitmaps


def check_images_fit(served: ServedModel, prompt: ChatPrompt, n_images: int) -> None:
    """A prompt with images must leave a sequence's context room for one generated token; if it does not, the
    message counts what the images take, which a client cannot know before the projector has sized them."""
    n_ctx_seq = served.facts.n_ctx_seq
    image_tokens = sum(span.n_tokens for span in prompt.media)
    log.info("images_read", images=n_images, image_tokens=image_tokens, prompt_tokens=len(prompt.tokens))
    if len(prompt.tokens) < n_ctx_seq:
        return
    text_tokens = len(prompt.tokens) - image_tokens
    raise InvalidRequest([Problem(
        "messages", f"images and text within {n_ctx_seq} tokens",
        f"the {n_images} images take {image_tokens} tokens ({image_tokens // max(1, n_images)} each on average) and "
        f"the text {text_tokens}: {len(prompt.tokens)} prompt tokens, and a sequence holds {n_ctx_seq} with room "
        f"for the answer; send fewer images", [n_images, image_tokens, n_ctx_seq])],
        code="context_length_exceeded")
