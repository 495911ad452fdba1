"""A chat request as the engine takes it: its messages, tools and template variables as a Chat (llama-server's
terms), its images read (links fetched on the event loop: the engine never waits on a network) and handed over as
the request sent them. The served model makes the rest of it (engine/serving/input_processor.py): the template's
prompt, the tool calls' grammar and triggers, the answer's reader."""

from __future__ import annotations

from worker.api.generation_fields import ChatRequest
from worker.api.images import AudioInput, ImageInput
from worker.api.media_links import read_links
from worker.engine import Chat, Media
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


async def chat_images(chat: ChatRequest, media: MediaSettings) -> tuple[Media, ...]:
    """The chat's images and clips, in the order of their markers, each link read first."""
    if not chat.images:
        return ()
    return tuple(_media(item, media) for item in await read_links(chat.images, media))


def _media(item: ImageInput | AudioInput, media: MediaSettings) -> Media:
    if isinstance(item, AudioInput):
        return Media(item.data, item.field, f"a {item.format} file", "audio", media.max_audio_seconds)
    return Media(item.data, item.field, f"{item.width} x {item.height}")
