"""Ingest-specific failures: narrower kinds of the appliance's shared errors, each with its own code.

Every one of them is still an instance of the shared class a caller catches
(`ConversionFailed`, `UnsupportedFile`), so code that only knows those keeps working.
"""
from __future__ import annotations

from appliance.errors import ConversionFailed, UnsupportedFile


class BinaryContent(UnsupportedFile):
    """A file with a text extension that holds binary data."""

    code = "binary_content"
    hint = "The file has a text extension but holds binary data; rename or exclude it."


class EncryptedDocument(ConversionFailed):
    code = "encrypted_document"
    hint = "Save an unencrypted copy of the document (remove the password) or exclude it."


class MislabelledFile(ConversionFailed):
    """The bytes are not what the extension promises (a .pdf that is HTML, a .docx that is no zip)."""

    code = "mislabelled_file"
    hint = "Give the file the extension of what it really is, or exclude it."


class ImageTooLarge(ConversionFailed):
    code = "image_too_large"
    hint = "Downscale the image below the pixel limit, or exclude it."


class ConversionTimeout(ConversionFailed):
    code = "conversion_timeout"
    hint = "Raise the per-file conversion time limit, split the document, or exclude it."


class ConversionMemoryLimit(ConversionFailed):
    code = "conversion_memory_limit"
    hint = "Raise the per-worker memory limit, split the document, or exclude it."


class WorkerCrashed(ConversionFailed):
    code = "conversion_crashed"
    hint = "The converter process died on this file; the file is probably damaged. Exclude it or repair it."
