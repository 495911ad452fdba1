"""A test audio projector for the test model, and clips to play it.

The audio twin of tests/vision_helpers.py: no audio model is within reach of these machines, so the tests build a
projector for SmolLM2-135M with gguf-py whose answers can be checked. A clip of a LOW band of tones arrives in the
prompt as the input embedding of " red", a clip of a HIGH band as " blue" (one embedding per audio token that carries
the tone), so asking the model what colour it is shown answers with the word the audio's pitch stands for.

It is llama.cpp's `voxtral` projector (tools/mtmd/models/whisper-enc.cpp: a Whisper encoder, frames stacked by
clip.audio.projector.stack_factor, a two-layer GELU MLP without biases), fed by mtmd's Whisper preprocessing
(tools/mtmd/mtmd-audio.cpp): 16 kHz, a 400-sample periodic Hann window every 160 samples, N_MEL Slaney-scale mel
bins, log10, clamped at the maximum less 8, (x + 4) / 4, 30 s of zeros appended and one window of 3000 frames (30 s)
kept per chunk. What each stage does to a clip here:

- The clips are sums of cosines at multiples of 100 Hz, so the signal repeats every 160 samples, the hop: every mel
  frame of the tone is the same, and the reflection padding at the start (an even function mirrored) changes
  nothing. Each band's tones fill its mel bins (band_bins: 16 each, 261-819 Hz and 1932-3437 Hz); the other
  band's bins read the silence floor, as do the appended zeros.
- conv1d 1 (kernel 3, centre tap only): channel 0 is CONV_GAIN x (mean of the LOW bins - mean of the HIGH bins),
  channel 1 its negative, the rest 0. Silence reads the same floor in every bin: 0 on both. A LOW frame puts +3.8
  on channel 0 and -3.8 on channel 1 (a HIGH frame -3.4 and +3.4); GELU(erf) keeps the positive one and all but
  zeroes the negative one (GELU(-3.4) = -0.001).
- conv1d 2 (stride 2, centre tap): the identity on the channels; GELU again changes nothing that matters.
- Position embeddings 0, and one encoder block whose weights into the residual are ~RESIDUAL_SCALE: the channels
  pass through (an encoder needs one block: whisper-enc.cpp asserts on layer 0's norms and biases).
- clip.cpp's build_vit then averages frame pairs (nn.AvgPool1d(2, 2), which it applies to voxtral as to qwen2a) and
  the stack joins STACK = 5 of those (not Voxtral's 4, on which this llama.cpp aborts: see STACK): one audio token
  holds 20 mel frames (0.2 s), 150 tokens a window (AUDIO_TOKENS).
- mm.a.mlp.1 takes MLP_GAIN x each channel's mean over the stacked frames (13.6 to 15.3: GELU is the identity
  there, and 0 at 0), mm.a.mlp.2 maps hidden 0 onto " red"'s embedding and hidden 1 onto " blue"'s (taken from the
  model's own token_embd), each divided by the value that band's steady tone gives, which is computed here with
  numpy through the same preprocessing (mel_spectrogram): a token of steady tone comes out as the word's embedding
  itself (to 2e-4), a token of silence as 0 (to 1e-6).

mtmd writes Voxtral's "[BEGIN_AUDIO]" as text before the audio; SmolLM2's vocabulary lacks that token, so it is
tokenized as plain text, which the model reads past.
"""

from __future__ import annotations

import base64
import io
import math
import wave
from pathlib import Path

import gguf
import numpy as np

from tests.vision_helpers import QUESTION, add_vit_block, token_embeddings

# mtmd's Whisper preprocessing (clip.cpp sets these for voxtral; the number of mel bins is the file's).
SAMPLE_RATE = 16000
N_FFT = 400  # the window, and the FFT's size: 201 frequency bins 40 Hz apart
HOP = 160  # 10 ms
N_MEL = 80  # Whisper's; real Voxtral has 128, any number up to 256 loads
WINDOW_FRAMES = 3000  # mel frames a chunk: 30 s; mtmd appends 30 s of zeros and drops the last, partial window
MEL_FLOOR = 5.960464477539063e-08  # the power a silent mel bin is clamped to before log10

# The projector's shape.
HIDDEN = 8  # the encoder's width: the two channels and zeros
FFN = 16
# clip.audio.projector.stack_factor, required for voxtral. Not Voxtral's own 4: clip.cpp pools 1500 frames to 750,
# which build_stack pads to 188 rows of 4, while clip_n_output_tokens counts 3000 / 4 / 2 / 2 = 187, and clip_encode
# aborts the process on the mismatch ("Invalid number of output tokens"). 5 divides 750: 150 rows, 150 counted.
STACK = 5
CONV_GAIN = 2.0  # a power of 2: CONV_GAIN / 16 is exact in F16, so silence cancels to 0 exactly
MLP_GAIN = 4.0  # mm.a.mlp.1: 4 x a channel's mean (~4): past GELU's bend
RESIDUAL_SCALE = 1e-4  # the encoder block's weights into the residual stream: small, the channels pass through

# One window's audio tokens, as clip_n_output_tokens counts them for voxtral: 3000 frames, aligned to the stack
# factor and divided by it, halved for conv1d 2's stride, halved again for the average pooling.
AUDIO_TOKENS = math.ceil(WINDOW_FRAMES / STACK) // 2 // 2  # 150
# What the graph makes: 1500 frames after conv1d 2, 750 pooled, padded up to whole stacks.
assert math.ceil(WINDOW_FRAMES // 4 / STACK) == AUDIO_TOKENS, "clip_encode aborts where the two counts differ"
FRAMES_PER_TOKEN = 2 * 2 * STACK  # 20 mel frames (0.2 s), of which the centre taps read every other one

# The bands: each band's tones are every multiple of 100 Hz in its range (a multiple of 100 Hz repeats every hop), and
# its mel bins are those centred in the range: 16 each, so that conv1d 1's two means weigh the same.
BANDS = {"low": (250.0, 850.0), "high": (1900.0, 3500.0)}
AUDIO_COLOURS = {"low": "red", "high": "blue"}  # the word each band's clip turns into
WORDS = (" red", " blue")  # channel 0 (LOW - HIGH), channel 1 (HIGH - LOW)
AMPLITUDE = 0.8  # the clip's peak (all cosines in phase at t = 0), below 16-bit full scale
FADE_SECONDS = 0.05  # a raised-cosine fade-out: an abrupt stop would splash into the other band's bins
DEFAULT_SECONDS = 24.0  # 119 tokens of tone in a window of 150; 768 KB of WAV (a second more, 32 KB more)


def _hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """The Slaney mel scale mtmd builds its filterbank with (librosa's default, not HTK's): linear to 1 kHz, then
    logarithmic."""
    hz = np.asarray(hz, np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(hz < 1000.0, hz * 3.0 / 200.0, 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) / log_step)


def _mel_to_hz(mel: np.ndarray | float) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(mel < 15.0, mel * 200.0 / 3.0, 1000.0 * np.exp((mel - 15.0) * log_step))


def mel_filterbank(n_mel: int = N_MEL) -> tuple[np.ndarray, np.ndarray]:
    """mtmd_audio_cache::fill_mel_filterbank_matrix: triangles between n_mel + 2 points evenly spaced in mel from 0
    to 8 kHz, Slaney area-normalised. Returns (weights (n_mel, N_FFT // 2 + 1), each bin's centre in Hz)."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(SAMPLE_RATE / 2), n_mel + 2))
    hz = np.arange(N_FFT // 2 + 1) * SAMPLE_RATE / N_FFT
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (hz >= left) & (hz <= centre)
    falling = (hz > centre) & (hz <= right)
    weights = np.where(rising, (hz - left) / (centre - left), np.where(falling, (right - hz) / (right - centre), 0.0))
    return weights * (2.0 / (right - left)), edges[1:-1]


def band_bins(band: str) -> np.ndarray:
    """The mel bins whose centres lie in the band's range."""
    low, high = BANDS[band]
    _, centres = mel_filterbank()
    return np.flatnonzero((centres >= low) & (centres <= high))


def tones(band: str) -> list[int]:
    """The band's tones in Hz: every multiple of 100 Hz in its range."""
    low, high = BANDS[band]
    return list(range(math.ceil(low / 100.0) * 100, int(high) + 1, 100))


def _samples(band: str, seconds: float) -> np.ndarray:
    """The clip as 16-bit samples."""
    n = round(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    freqs = tones(band)
    signal = np.zeros(n)
    for f in freqs:  # in phase at t = 0: cosines are even, so mtmd's mirrored start continues the tone
        signal += np.cos(2 * np.pi * f * t)
    signal *= AMPLITUDE / len(freqs)
    fade = min(n, int(FADE_SECONDS * SAMPLE_RATE))
    signal[n - fade:] *= 0.5 + 0.5 * np.cos(np.pi * np.arange(fade) / fade)  # 1 down to ~0
    return np.round(signal * 32767).astype(np.int16)


def wav(band: str, seconds: float = DEFAULT_SECONDS) -> bytes:
    """A clip of the band's tones: 16-bit mono WAV at 16 kHz, written with the stdlib's wave. Under 29.99 s it is
    one window (mtmd makes a second chunk from 2999 frames of audio on); its first tone_tokens(seconds) audio tokens
    carry the tone, those after it the appended silence."""
    if band not in BANDS:
        raise ValueError(f"band must be one of {sorted(BANDS)}, not {band!r}")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(_samples(band, seconds).tobytes())
    return buffer.getvalue()


def tone_tokens(seconds: float = DEFAULT_SECONDS) -> int:
    """How many of a clip's first audio tokens are steady tone: token j reads mel frames 20j..20j+18 (even ones),
    frame f the samples 160f - 200 .. 160f + 200, and the tone is steady until the fade-out."""
    steady_end = round(seconds * SAMPLE_RATE) - int(FADE_SECONDS * SAMPLE_RATE)
    last_frame = (steady_end - N_FFT // 2) // HOP  # the last frame whose window ends before the fade
    return max(0, min(AUDIO_TOKENS, (last_frame - (FRAMES_PER_TOKEN - 2)) // FRAMES_PER_TOKEN + 1))


def silent_from(seconds: float = DEFAULT_SECONDS) -> int:
    """The first audio token that reads only the appended zeros (its outputs are 0)."""
    n = round(seconds * SAMPLE_RATE)
    first_frame = -(-(n + N_FFT // 2) // HOP)  # the first frame whose window starts past the clip
    return min(AUDIO_TOKENS, -(-first_frame // FRAMES_PER_TOKEN))


def mel_spectrogram(samples: np.ndarray) -> np.ndarray:
    """mtmd_audio_preprocessor_whisper on float samples, in numpy: (N_MEL, frames) of the whole padded clip (its
    first WINDOW_FRAMES are the first chunk). 200 samples mirrored before the clip, 30 s + 200 samples of zeros
    after, |FFT|^2 of each Hann-windowed frame through the filterbank, clamped at MEL_FLOOR, log10, clamped at the
    maximum less 8, then (x + 4) / 4."""
    n, half = len(samples), N_FFT // 2
    padded = np.zeros(n + SAMPLE_RATE * 30 + N_FFT)
    padded[half:half + n] = samples
    padded[:half] = samples[1:half + 1][::-1]
    n_frames = (len(padded) - N_FFT) // HOP + 1
    hann = 0.5 * (1.0 - np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT))  # periodic
    frames = padded[np.arange(n_frames)[:, None] * HOP + np.arange(N_FFT)[None, :]] * hann
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    weights, _ = mel_filterbank()
    mel = np.log10(np.maximum(power @ weights.T, MEL_FLOOR)).T
    mel = np.maximum(mel, mel.max() - 8.0)
    return (mel + 4.0) / 4.0


def _gelu(x: float) -> float:
    """GELU as ggml_gelu_erf computes it: x * Phi(x)."""
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _conv1_weights() -> np.ndarray:
    """conv1d 1's centre tap, (HIDDEN, N_MEL): channel 0 = CONV_GAIN x (mean LOW - mean HIGH), channel 1 = -that."""
    low, high = band_bins("low"), band_bins("high")
    assert len(low) == len(high), "the two means must weigh the same for silence to cancel"
    tap = np.zeros((HIDDEN, N_MEL), np.float32)
    tap[0, low], tap[0, high] = CONV_GAIN / len(low), -CONV_GAIN / len(high)
    tap[1] = -tap[0]
    return tap


def steady_hidden(band: str) -> float:
    """The value a token of the band's steady tone takes on its channel's hidden unit of mm.a.mlp.1, through the
    graph in numpy: mel frame -> conv1d 1 -> GELU -> conv1d 2 (identity) -> GELU -> (the block, the pooling and the
    stack change nothing on steady frames) -> MLP_GAIN x the mean of the stacked frames -> GELU. The mel values go in
    as F16, as ggml's conv1d im2col stores them."""
    mel = mel_spectrogram(_samples(band, 1.0) / 32768.0)  # as miniaudio reads 16-bit PCM
    frame = mel[:, 50].astype(np.float16).astype(np.float64)  # any steady frame: they are all the same
    channel = 0 if band == "low" else 1
    value = float(_conv1_weights()[channel].astype(np.float16).astype(np.float64) @ frame)
    return _gelu(MLP_GAIN * _gelu(_gelu(value)))


def build_audio_projector(model: Path, out: Path, stack: int = STACK) -> Path:
    """The tone projector for `model`, written to `out`: a voxtral mmproj whose LOW clips come out as " red"'s input
    embedding and HIGH clips as " blue"'s (module docstring). `stack`: another stack factor, for a test of the ones
    this llama.cpp aborts on (the clips' effect holds for STACK only)."""
    words = token_embeddings(model, WORDS)  # (2, n_embd)
    n_embd = words.shape[1]
    writer = gguf.GGUFWriter(out, "clip")
    writer.add_bool("clip.has_audio_encoder", True)
    writer.add_string("clip.projector_type", "voxtral")
    shape = {"num_mel_bins": N_MEL, "embedding_length": HIDDEN, "feed_forward_length": FFN, "block_count": 1,
             "projection_dim": n_embd, "attention.head_count": 1, "projector.stack_factor": stack}
    for key, value in shape.items():
        writer.add_uint32(f"clip.audio.{key}", value)
    writer.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)

    # ggml's conv1d kernel is [K, IC, OC]: numpy (OC, IC, K), PyTorch's Conv1d layout. F16, as converted Whisper
    # encoders have them; biases (OC, 1), as convert_hf_to_gguf unsqueezes them, so they broadcast over time.
    conv1 = np.zeros((HIDDEN, N_MEL, 3), np.float32)
    conv1[:, :, 1] = _conv1_weights()
    writer.add_tensor("a.conv1d.1.weight", conv1.astype(np.float16))
    writer.add_tensor("a.conv1d.1.bias", np.zeros((HIDDEN, 1), np.float32))
    conv2 = np.zeros((HIDDEN, HIDDEN, 3), np.float32)
    conv2[:, :, 1] = np.eye(HIDDEN)
    writer.add_tensor("a.conv1d.2.weight", conv2.astype(np.float16))
    writer.add_tensor("a.conv1d.2.bias", np.zeros((HIDDEN, 1), np.float32))
    # whisper-enc.cpp views n_frames / 2 = 1500 rows of it for a 3000-frame window.
    writer.add_tensor("a.position_embd.weight", np.zeros((WINDOW_FRAMES // 2, HIDDEN), np.float32))
    _add_encoder_block(writer)

    # The stacked row is STACK frames of HIDDEN channels, frame-major: numpy (out, in).
    mlp1 = np.zeros((HIDDEN, stack * HIDDEN), np.float32)
    for channel in range(2):
        mlp1[channel, channel::HIDDEN] = MLP_GAIN / stack
    writer.add_tensor("mm.a.mlp.1.weight", mlp1)
    mlp2 = np.zeros((n_embd, HIDDEN), np.float32)
    mlp2[:, 0] = words[0] / steady_hidden("low")
    mlp2[:, 1] = words[1] / steady_hidden("high")
    writer.add_tensor("mm.a.mlp.2.weight", mlp2)  # voxtral's MLP has no biases: clip.cpp loads none
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _add_encoder_block(writer: gguf.GGUFWriter) -> None:
    """One Whisper encoder block (clip.cpp's build_vit): q and v with biases, k without (whisper-enc.cpp asserts
    both); random weights, those into the residual ~RESIDUAL_SCALE."""
    add_vit_block(writer, "a.blk.0", HIDDEN, FFN, RESIDUAL_SCALE, np.random.default_rng(0), biased=("attn_q", "attn_v"))


def audio_message(*clips: bytes, text: str = QUESTION) -> list[dict]:
    """One OpenAI user message: the clips as input_audio parts (base64 WAV), then the text."""
    parts = [{"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}}
             for clip in clips]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]
