"""Prompts of an exact token count, distinct per request, cut from original prose by the model's own tokenizer."""

from __future__ import annotations

from pathlib import Path

# Some original, varied prose to cut prompts from: repeated text would be cheaper to
# tokenize and could let a server's prompt cache skip work the others do.
FILLER = (
    "The harbour town woke before the sun, as it always did in the fishing season. Nets were "
    "checked for tears, engines coughed into life, and the baker on Quay Street pulled the first "
    "trays of rye bread from an oven older than anyone in the village. Mara, who kept the ledger "
    "for the cooperative, counted crates of ice while her brother argued with the harbourmaster "
    "about a mooring fee that had doubled over the winter. Beyond the breakwater the sea was flat "
    "and grey, and a line of gulls followed the first boat out past the lighthouse. Inland, the "
    "orchards were still white with frost; the apple growers had lit smudge pots along the rows "
    "and the smoke drifted down the valley towards the river mill, where a new turbine was being "
    "installed to replace the water wheel that had turned for two hundred years. The engineer "
    "from the city had brought drawings, a laptop and very strong opinions about torque, and the "
    "miller, who had opinions of his own, followed him everywhere with a thermos of coffee. At the "
    "school the children were learning about tides: why there are two a day, why the spring tides "
    "come with the full and new moon, and why the old sea wall was built exactly where it stands. "
    "Their teacher had pinned a chart of the bay to the wall, marked with wrecks, sandbanks and "
    "the route of the ferry that had stopped running when the bridge opened. In the afternoon a "
    "storm warning came over the radio, and by evening every boat was back, the nets were hung to "
    "dry, and the lights in the tavern burned late while the older fishermen compared this winter "
    "with the great storm of their childhood, each version of the story a little wilder than the "
    "last. "
)


class PromptFactory:
    """Exact-length prompts, distinct per request, counted by the model's own tokenizer.

    Each prompt starts with a per-request header so no server can reuse a cached prefix
    from an earlier request (llama-server caches prompts per slot by default).
    """

    def __init__(self, model: Path) -> None:
        import llama_cpp  # the worker's dependency; only the vocabulary is loaded

        self._llama = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
        vocab = llama_cpp.llama_model_get_vocab(self._llama._model.model)
        self.end_of_generation = [t for t in range(self._llama.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        self._filler = self._tokenize(FILLER * 24)  # about 9,000 tokens: prompts up to the 8,192 context
        self.metadata = dict(self._llama.metadata)
        self._issued = 0  # prompts handed out to the current server, across its levels

    def _tokenize(self, text: str) -> list[int]:
        # add_bos follows the model's add_bos_token, as the servers do
        return self._llama.tokenize(text.encode(), add_bos=True, special=False)

    def restart(self) -> None:
        """Each server gets the same sequence of prompts."""
        self._issued = 0

    def prompt(self, length: int) -> str:
        # A serial number, not (client, index): those repeat from level to level,
        # and a slot that still holds the previous level's identical prompt would skip prefill.
        self._issued += 1
        header = (
            f"Request {self._issued}. Read these notes from a village chronicle, then write a long, "
            "detailed continuation of the story.\n\n"
        )
        n = length - len(self._tokenize(header))
        # Detokenizing a slice and re-tokenizing can merge or split tokens at the seam,
        # so correct the slice by the difference until the count is exact.
        for _ in range(8):
            text = header + self._llama.detokenize(self._filler[:n]).decode("utf-8", "ignore")
            got = len(self._tokenize(text))
            if got == length:
                return text
            n += length - got
        raise ValueError(f"cannot build a {length}-token prompt")

    def kv_cache_bytes(self, ctx_size: int) -> int:
        """f16 K and V for every layer: what a context of ctx_size tokens holds resident."""
        arch = self.metadata.get("general.architecture", "llama")
        layers = int(self.metadata[f"{arch}.block_count"])
        heads = int(self.metadata[f"{arch}.attention.head_count"])
        kv_heads = int(self.metadata.get(f"{arch}.attention.head_count_kv", heads))
        head_dim = int(self.metadata[f"{arch}.embedding_length"]) // heads
        return ctx_size * layers * kv_heads * head_dim * 2 * 2

