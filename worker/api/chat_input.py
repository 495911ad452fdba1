"""A chat request as the engine takes it: its messages, tools and template variables as a Chat (llama-server's
terms), its images read (links fetched on the event loop: the engine never waits on a network) and handed over as
the request sent them. The served model makes the rest of it (engine/serving/input_processor.py): the template's
prompt, the tool calls' grammar and triggers, the answer's reader."""

from __future__ import annotations

from worker.api.generation_fields import ChatRequest
from worker.api.images import ImageInput
from worker.api.media_links import read_links
from worker.engine import Chat, Image
from worker.settings import MediaSettings


def as_chat(chat: ChatRequest) -> Chat:
    """The request as the chat template takes it. A reasoning effort goes along: the served model hands it to a
    template that reads it (gpt-oss); elsewhere it stands for the reasoning budget the request was read with
    (api/reasoning_budgets.py)."""
    tools = chat.tools
    return Chat(tuple(chat.messages),
                tools=tuple(f.as_tool() for f in tools.functions) if tools else (),
                tool_choice=tools.choice if tools else "auto", only=tools.only if tools else None,
                parallel_tool_calls=tools.parallel if tools else True, template_kwargs=chat.template_kwargs,
                reasoning_effort=chat.reasoning_effort, reasoning_format=chat.reasoning_format)


async def chat_images(chat: ChatRequest, media: MediaSettings) -> tuple[Image, ...]:
    """The chat's images, in the order of their markers, each link read first."""
    if not chat.images:
        return ()
    return tuple(_image(image) for image in await read_links(chat.images, media))


def _image(image: ImageInput) -> Image:
    return Image(image.data, image.field, f"{image.width} x {image.height}")
