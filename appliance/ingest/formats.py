"""Which files are documents: the extensions a scan picks up, without importing any converter."""
from __future__ import annotations

from appliance.config import Settings
from appliance.ingest.ocr import OcrConfig, ocr_status

TEXT_EXTENSIONS: frozenset[str] = frozenset({".md", ".markdown", ".txt"})
"""Kept verbatim: line N of the Markdown is line N of the file (`has_lines`)."""

SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(
    {
        ".md", ".markdown", ".txt", ".pdf", ".docx", ".pptx", ".xlsx", ".xls",
        ".html", ".htm", ".csv", ".epub", ".ipynb", ".json",
    }
)
IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp"}
)
"""Become documents through OCR; a scanner should list them only when OCR is available."""


def accepted_extensions(ocr: OcrConfig | None) -> frozenset[str]:
    """Extensions a scan should pick up: images only when OCR is configured and installed."""
    if ocr is not None and ocr_status(ocr)[1] is None:
        return SUPPORTED_EXTENSIONS | IMAGE_EXTENSIONS
    return SUPPORTED_EXTENSIONS


def ocr_config(settings: Settings) -> OcrConfig:
    return OcrConfig(languages=settings.ocr_languages, min_chars_per_page=settings.ocr_min_chars_per_page)


def extensions(settings: Settings) -> frozenset[str]:
    """What a sync under these settings picks up (asks tesseract once per process)."""
    return accepted_extensions(ocr_config(settings))
