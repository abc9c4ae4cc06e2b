"""Local OCR with the tesseract command-line program (no Python binding, no network).

Why tesseract and not RapidOCR: measured here (docs/MODELS.md), tesseract 5 with the
Debian `rus`/`deu` data reads English, German and Russian; RapidOCR's offline models
garble or drop Cyrillic. tesseract runs as one subprocess per page with
OMP_THREAD_LIMIT=1, so parallelism comes from the worker pool, not from OpenMP
threads fighting over two cores.

PDF pages are rendered with pypdfium2 in bounded windows; each page, bitmap and PIL
image is closed as soon as it has been read, and the document is reopened per window,
so memory does not grow with the page count.
"""
from __future__ import annotations

import functools
import io
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.errors import ConversionFailed, OcrUnavailable
from appliance.ingest.failures import ImageTooLarge

if TYPE_CHECKING:
    from PIL import Image

OCR_ENGINE = "tesseract"

APT_HINT = (
    "Install tesseract with its language data: apt-get install tesseract-ocr "
    "tesseract-ocr-eng tesseract-ocr-deu tesseract-ocr-rus (the Docker image has them)."
)


@dataclass(frozen=True)
class OcrConfig:
    """OCR settings, passed in by the caller (OCR_LANGUAGES etc.); no global state."""

    languages: str = "eng+deu+rus"
    min_chars_per_page: int = 100
    """A PDF page whose text layer has fewer non-space characters than this is OCRed."""
    dpi: int = 300
    """Render resolution for PDF pages (measured: 300 beats 200 on small print, see bench)."""
    page_window: int = 8
    """PDF pages rendered and recognised per window before the document is reopened."""
    max_pixels: int = 100_000_000
    """Images above this many pixels are refused; PDF pages are rendered below it."""
    page_timeout_s: float = 180.0
    """Time limit for one tesseract run on one page."""
    psm: int = 3
    detect_orientation: bool = True
    """Run tesseract's orientation detection first and turn pages scanned sideways or upside down
    (a 90/180/270-degree page otherwise comes out as garbage). Costs about 1-2 s per page."""
    tesseract_cmd: str = "tesseract"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_THREAD_LIMIT"] = "1"
    return env


@functools.lru_cache(maxsize=8)
def _probe(cmd: str) -> tuple[str | None, frozenset[str]]:
    """(version, installed languages) of a tesseract binary, or (None, {}) if absent."""
    exe = shutil.which(cmd)
    if exe is None:
        return None, frozenset()
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=20, env=_env()
        )
        m = re.search(r"tesseract\s+v?([0-9][0-9.]*\S*)", out.stdout + out.stderr)
        version = m.group(1) if m else "unknown"
        langs = subprocess.run(
            [exe, "--list-langs"], capture_output=True, text=True, timeout=20, env=_env()
        )
        names = frozenset(
            line.strip()
            for line in (langs.stdout + "\n" + langs.stderr).splitlines()[1:]
            if line.strip() and " " not in line.strip()
        )
        return version, names
    except (OSError, subprocess.SubprocessError):
        return None, frozenset()


def ocr_status(cfg: OcrConfig | None) -> tuple[str, str | None]:
    """("tesseract 5.3.0 (eng+deu+rus)", None), or ("unavailable", hint naming the install command)."""
    if cfg is None:
        return "unavailable", "OCR is switched off in the configuration."
    version, installed = _probe(cfg.tesseract_cmd)
    if version is None:
        return "unavailable", APT_HINT
    wanted = [lang for lang in cfg.languages.split("+") if lang]
    missing = [lang for lang in wanted if lang not in installed]
    if missing:
        pkgs = " ".join(f"tesseract-ocr-{lang}" for lang in missing)
        return "unavailable", (
            f"tesseract {version} lacks language data {'+'.join(missing)}: "
            f"apt-get install {pkgs}, or change OCR_LANGUAGES."
        )
    return f"tesseract {version} ({'+'.join(wanted)})", None


def require_ocr(cfg: OcrConfig | None, what: str) -> OcrConfig:
    """Return cfg when OCR can run; otherwise raise OcrUnavailable naming `what` and the fix."""
    _state, hint = ocr_status(cfg)
    if hint is not None or cfg is None:
        raise OcrUnavailable(f"{what} needs OCR, which is unavailable: {hint}", hint=hint or APT_HINT)
    return cfg


def _clean(text: str) -> str:
    text = text.replace("\f", "\n")
    lines = [ln.rstrip() for ln in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _tesseract(data: bytes, args: list[str], cfg: OcrConfig) -> str:
    try:
        proc = subprocess.run(
            [cfg.tesseract_cmd, "stdin", "stdout", *args],
            input=data,
            capture_output=True,
            timeout=cfg.page_timeout_s,
            env=_env(),
        )
    except FileNotFoundError:
        raise OcrUnavailable(f"tesseract ({cfg.tesseract_cmd}) is not installed", hint=APT_HINT) from None
    except subprocess.TimeoutExpired:
        raise ConversionFailed(f"OCR of one page timed out after {cfg.page_timeout_s:g} s") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ConversionFailed(f"tesseract failed: {err[-1] if err else proc.returncode}")
    return proc.stdout.decode("utf-8", "replace")


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


ORIENTATION_MIN_CONFIDENCE = 2.0
"""tesseract's OSD confidence needed before a page is turned (measured: 2.5-2.9 on the rotated
test pages, 11-33 on upright text pages)."""


def page_rotation(data: bytes, cfg: OcrConfig, dpi: int | None = None) -> int:
    """Degrees (0/90/180/270) to turn the page clockwise so its text stands upright; 0 if unsure."""
    args = ["--psm", "0"] + (["--dpi", str(dpi)] if dpi else [])
    try:
        out = _tesseract(data, args, cfg)
    except ConversionFailed:
        return 0  # too little text to tell: leave the page as it is
    rot = re.search(r"Rotate:\s*(\d+)", out)
    conf = re.search(r"Orientation confidence:\s*([0-9.]+)", out)
    if not rot or not conf or float(conf.group(1)) < ORIENTATION_MIN_CONFIDENCE:
        return 0
    return int(rot.group(1)) % 360


_page_recognised: Callable[[], None] | None = None
PROGRESS_MIN_CHARS = 20
"""What a page must yield to count as progress: a file of blank pages (scripts/hostile_files.py has one of 10,000)
is no scan being read, and stops at CONVERT_TIMEOUT as any other file does."""


def report_pages_to(hook: Callable[[], None] | None) -> None:
    """Call `hook` after each page or frame whose text OCR recognised (PROGRESS_MIN_CHARS): a conversion worker's
    sign of progress, by which its parent lets a long scan run past CONVERT_TIMEOUT (appliance.ingest.isolate)."""
    global _page_recognised
    _page_recognised = hook


def ocr_pil(image: Image.Image, cfg: OcrConfig, dpi: int | None = None) -> str:
    """Recognise one PIL image (fed to tesseract as PNG on stdin), turned upright first."""
    if image.mode not in ("L", "RGB", "1"):
        image = image.convert("RGB")
    data = _png(image)
    if cfg.detect_orientation:
        angle = page_rotation(data, cfg, dpi)
        if angle:
            data = _png(image.rotate(-angle, expand=True))  # PIL turns counter-clockwise
    args = ["-l", cfg.languages, "--psm", str(cfg.psm)] + (["--dpi", str(dpi)] if dpi else [])
    text = _clean(_tesseract(data, args, cfg))
    if _page_recognised is not None and len("".join(text.split())) >= PROGRESS_MIN_CHARS:
        _page_recognised()
    return text


def _check_pixels(width: int, height: int, cfg: OcrConfig, name: str) -> None:
    if width * height > cfg.max_pixels:
        raise ImageTooLarge(
            f"{name}: image of {width}x{height} pixels ({width * height / 1e6:.0f} MP) "
            f"exceeds the limit of {cfg.max_pixels / 1e6:.0f} MP"
        )


def ocr_image_file(path: Path, cfg: OcrConfig) -> list[str]:
    """Recognise every frame of an image file (all pages of a multi-page TIFF)."""
    import warnings

    from PIL import Image, ImageSequence, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = cfg.max_pixels  # Pillow's own bomb check, belt and braces
    texts: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(path)
        with img:
            _check_pixels(img.width, img.height, cfg, str(path))
            for frame in ImageSequence.Iterator(img):
                _check_pixels(frame.width, frame.height, cfg, str(path))
                frame.load()
                texts.append(ocr_pil(frame, cfg))
    except Image.DecompressionBombError as exc:
        raise ImageTooLarge(f"{path}: {exc}") from None
    except UnidentifiedImageError:
        raise ConversionFailed(f"{path}: not an image Pillow can read (damaged or mislabelled)") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ConversionFailed(f"{path}: image could not be read: {exc}") from None
    return texts


def pdf_page_texts(path: Path, window: int = 32) -> list[str]:
    """Each page's text layer as pdfium reads it (plain text, no layout), in windows."""
    import pypdfium2 as pdfium

    counts: list[str] = []
    doc = pdfium.PdfDocument(str(path))
    try:
        total = len(doc)
    finally:
        doc.close()
    for start in range(0, total, window):
        doc = pdfium.PdfDocument(str(path))
        try:
            for i in range(start, min(start + window, total)):
                page = doc[i]
                tp = page.get_textpage()
                try:
                    text = tp.get_text_range()
                finally:
                    tp.close()
                    page.close()
                counts.append(text.replace("\r\n", "\n"))
        finally:
            doc.close()
    return counts


def ocr_pdf_pages(path: Path, pages: list[int], cfg: OcrConfig) -> Iterator[tuple[int, str]]:
    """Render and recognise the given 0-based pages; yields (page index, text)."""
    import pypdfium2 as pdfium

    for start in range(0, len(pages), max(1, cfg.page_window)):
        doc = pdfium.PdfDocument(str(path))
        try:
            for i in pages[start : start + max(1, cfg.page_window)]:
                page = doc[i]
                try:
                    w_pt, h_pt = page.get_size()
                    scale = cfg.dpi / 72.0
                    px = (w_pt * scale) * (h_pt * scale)
                    if px > cfg.max_pixels:  # a poster-sized page: render smaller, not refuse
                        scale *= (cfg.max_pixels / px) ** 0.5
                    bitmap = page.render(scale=scale, grayscale=True)
                    try:
                        image = bitmap.to_pil()
                        text = ocr_pil(image, cfg, dpi=round(72 * scale))
                        image.close()
                        del image
                    finally:
                        bitmap.close()
                finally:
                    page.close()
                yield i, text
        finally:
            doc.close()
