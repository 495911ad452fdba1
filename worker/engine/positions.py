"""Where a sequence's tokens sit in llama.cpp's positions. The engine counts cells by tokens (the prefix cache,
checkpoints, drafts, chunks); llama.cpp places them, and cuts them, by position. The two are one number a token,
except on a model that places images by M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5): there an image's grid of
tokens takes the larger of its sides in positions (mtmd_input_chunk_get_n_pos), all its cells at its first position
(their row and column set the rest, tools/mtmd/mtmd.cpp: mtmd_image_tokens_get_decoder_pos), and the text after it
goes on from there, as llama.cpp's own helper places it (mtmd_helper_eval_chunks)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.engine.media import MediaSpan


@dataclass(frozen=True)
class Positions:
    # The images that take fewer positions than tokens, in prompt order: none but under M-RoPE.
    folded: tuple[MediaSpan, ...] = ()

    @staticmethod
    def of_media(media: tuple[MediaSpan, ...]) -> Positions:
        folded = tuple(span for span in media if span.n_pos < span.n_tokens)
        return Positions(folded) if folded else TOKENS

    def cell(self, index: int) -> int:
        """The position of token `index`'s cell: a folded image's tokens all sit at its first."""
        shift = 0
        for span in self.folded:
            if index < span.start:
                break
            if index < span.end:
                return span.start - shift
            shift += span.n_tokens - span.n_pos
        return index - shift

    def cut(self, index: int) -> int | None:
        """The position from which llama.cpp drops cells so that the first `index` tokens' stay; None inside a
        folded image, whose cells share one position and go whole or not at all."""
        inside = any(span.start < index < span.end for span in self.folded)
        return None if inside else self.cell(index)

    def held_end(self, index: int) -> int:
        """The last position the first `index` tokens' cells hold (-1: none): where a slot's cells must end for
        the token at `index` to come next."""
        return self.cell(index - 1) if index > 0 else -1

    def whole(self, index: int) -> int:
        """`index`, or the start of the folded image it would cut into: a cut there keeps whole images."""
        return next((span.start for span in self.folded if span.start < index < span.end), index)


TOKENS = Positions()  # a position for each token, in order: every model's text, and images but under M-RoPE
