"""Reading text files whose encoding nobody wrote down.

Order of evidence: a byte-order mark; UTF-16/32 without a BOM (NUL bytes in a regular
pattern); strict UTF-8; then charset-normalizer's best guess over the bytes. A file
with NUL bytes that is not UTF-16/32 is binary data under a text extension and is
refused with `BinaryContent`, never decoded into garbage.
"""
from __future__ import annotations

import codecs
from pathlib import Path

from appliance.ingest.failures import BinaryContent

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

_SAMPLE = 64 * 1024


def _bom(data: bytes) -> tuple[str, int] | None:
    for bom, enc in _BOMS:
        if data.startswith(bom):
            return enc, len(bom)
    return None


def _utf16_without_bom(sample: bytes) -> str | None:
    """UTF-16 text of mostly Latin/Cyrillic script has NULs on one parity of byte positions."""
    if len(sample) < 4:
        return None
    n = len(sample) - (len(sample) % 2)
    even = sample[0:n:2]
    odd = sample[1:n:2]
    half = n // 2
    even_nul = even.count(0) / half
    odd_nul = odd.count(0) / half
    candidates: list[str] = []
    if odd_nul > 0.3 and even_nul < 0.05:
        candidates.append("utf-16-le")
    if even_nul > 0.3 and odd_nul < 0.05:
        candidates.append("utf-16-be")
    for enc in candidates:
        try:
            sample[:n].decode(enc)
        except UnicodeDecodeError:
            continue
        return enc
    return None


def detect_encoding(data: bytes) -> tuple[str, int]:
    """Return (codec name, number of BOM bytes to skip). Raises BinaryContent."""
    found = _bom(data)
    if found:
        return found
    sample = data[:_SAMPLE]
    if b"\x00" in sample:
        enc = _utf16_without_bom(sample)
        if enc:
            return enc, 0
        raise BinaryContent("contains NUL bytes: binary data, not text")
    try:
        data.decode("utf-8")
        return "utf-8", 0
    except UnicodeDecodeError as exc:
        # A file cut in the middle of a multi-byte sequence is still UTF-8.
        if exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return "utf-8", 0
    from charset_normalizer import from_bytes

    best = from_bytes(data[: 4 * _SAMPLE]).best()
    if best is None or best.coherence == 0.0:
        # No language recognised: typical for a few words of Russian in cp1251, which the
        # detector then reads as Korean or Chinese. Prefer a single-byte Cyrillic code page
        # when it turns (nearly) every non-ASCII byte into a Russian letter.
        cyr = _cyrillic_codepage(data[:_SAMPLE])
        if cyr:
            return cyr, 0
    if best is None:
        raise BinaryContent("is not text in any encoding that could be detected")
    enc = best.encoding
    if enc == "cp1125":  # cp866 with a few Ukrainian letters; identical for Russian text
        try:
            if data.decode("cp866") == data.decode("cp1125"):
                enc = "cp866"
        except UnicodeDecodeError:
            pass
    return enc, 0


_RUSSIAN = frozenset("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ")


def _cyrillic_codepage(sample: bytes) -> str | None:
    best: tuple[float, str] | None = None
    for enc in ("cp1251", "koi8_r", "cp866"):
        try:
            text = sample.decode(enc)
        except UnicodeDecodeError:
            continue
        high = [c for c in text if ord(c) > 127]
        if not high:
            return None
        letters = [c for c in high if c in _RUSSIAN]
        if len(letters) / len(high) < 0.9:
            continue
        lower = sum(1 for c in letters if c.islower()) / max(len(letters), 1)
        score = len(letters) / len(high) + lower
        if lower >= 0.5 and (best is None or score > best[0]):
            best = (score, enc)
    return best[1] if best else None


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode bytes of a text file; return (text, encoding). Line endings are kept."""
    enc, skip = detect_encoding(data)
    text = data[skip:].decode(enc, errors="replace")
    if "\x00" in text:
        raise BinaryContent("contains NUL characters after decoding: binary data, not text")
    return text, enc


def read_text(path: Path) -> tuple[str, str]:
    """Read and decode a text file; BinaryContent names the file."""
    data = Path(path).read_bytes()
    try:
        return decode_text(data)
    except BinaryContent as exc:
        raise BinaryContent(f"{path}: {exc}") from None
