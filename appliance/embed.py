"""Turn texts into vectors with the baked model; the only module that imports fastembed.

Nothing is loaded until first use. The model's own tokenizer is loaded once and
serves both token counting (untruncated, for chunking) and fastembed's batches
(truncated and padded here), because a second copy of the 250k-piece tokenizer
costs ~300 MB of RSS.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from appliance.errors import Hint, ModelCorrupt, NextAction
from appliance.models.bake import check_baked
from appliance.models.manifest import ModelSpec, load_spec

if TYPE_CHECKING:
    from fastembed import TextEmbedding
    from tokenizers import Tokenizer

__all__ = ["Embedder", "OnnxEmbedder", "load_spec"]

DEFAULT_TOKEN_BUDGET = 512
"""Padded tokens per batch. On CPU a bigger batch buys no speed and costs memory: at 4,096 the
model peaked at 824-829 MB, at 512 at 584-622 MB, with the same chunks/s (20.3-20.9 vs 19.9-20.3
at ~200 tokens, 7.7-8.5 vs 7.4-7.9 at ~400; `scripts/bench_embed.py --per-size 100`, two
interleaved rounds). Short passages still share a batch."""
DEFAULT_MAX_BATCH = 32

_REGISTER_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Encoded:
    ids: list[int]
    attention_mask: list[int]


class _BatchTokenizer:
    """What fastembed calls `encode_batch` on: the shared untruncated tokenizer, with
    truncation to max_length (keeping the closing special tokens) and padding done here."""

    def __init__(self, tokenizer: Tokenizer, max_length: int, pad_id: int) -> None:
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._pad_id = pad_id

    def encode_batch(self, texts: Sequence[str], *args: Any, **kwargs: Any) -> list[_Encoded]:
        rows = []
        for encoding in self._tokenizer.encode_batch(list(texts)):
            ids = encoding.ids
            if len(ids) > self._max_length:
                mask = encoding.special_tokens_mask
                tail = len(mask) - len(_rstrip_ones(mask))
                ids = ids[:self._max_length - tail] + (ids[-tail:] if tail else [])
            rows.append(ids)
        width = max((len(ids) for ids in rows), default=0)
        return [_Encoded(ids + [self._pad_id] * (width - len(ids)), [1] * len(ids) + [0] * (width - len(ids)))
                for ids in rows]


def _rstrip_ones(mask: list[int]) -> list[int]:
    end = len(mask)
    while end and mask[end - 1] == 1:
        end -= 1
    return mask[:end]


def _pad_token(model_path: Path) -> str:
    config = json.loads((model_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    pad = config.get("pad_token", "<pad>")
    return str(pad["content"] if isinstance(pad, dict) else pad)


def _fastembed_cache_dir() -> str:
    # fastembed takes a lock in its cache dir even when loading from a given path,
    # which fails on a read-only models volume; point it at a private temp dir.
    path = Path(tempfile.gettempdir()) / f"minirag-fastembed-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def import_fastembed() -> type[TextEmbedding]:
    """fastembed's TextEmbedding, with the HF hub switched offline before anything of it loads."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from fastembed import TextEmbedding

    return TextEmbedding


def _register(spec: ModelSpec) -> str:
    """Register spec with fastembed once per process, under our own alias (fastembed
    ships some of the same names with other files and pooling)."""
    TextEmbedding = import_fastembed()
    from fastembed.common.model_description import ModelSource, PoolingType

    alias = f"minirag/{spec.dir_name}-{spec.dim}-{spec.pooling}"
    with _REGISTER_LOCK:
        if any(m["model"] == alias for m in TextEmbedding.list_supported_models()):
            return alias
        TextEmbedding.add_custom_model(
            model=alias,
            pooling=PoolingType.MEAN if spec.pooling == "mean" else PoolingType.CLS,
            normalization=spec.normalize,
            sources=ModelSource(hf=spec.source.get("repo", spec.id)),
            dim=spec.dim,
            model_file="model.onnx",
        )
    return alias


class Embedder(Protocol):
    """What indexing and search ask of an embedder: OnnxEmbedder, or a deterministic fake in plumbing tests."""

    @property
    def spec(self) -> ModelSpec:
        """The model's id, dimensions, window and prefixes (what the index's identity records)."""

    @property
    def window(self) -> int:
        """The most text tokens one passage may have (a chunk's ceiling)."""

    def count_tokens(self, text: str) -> int:
        """Tokens of text, untruncated, as the model counts them."""

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised."""

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) float32, L2-normalised."""

    def load(self) -> None:
        """Load the model now instead of at first use."""


_TOKENIZERS: dict[tuple[Path, int, int], Tokenizer] = {}
_TOKENIZERS_LOCK = threading.Lock()


def tokenizer_at(path: Path) -> Tokenizer:
    """The tokenizer in the file `path`, untruncated and unpadded, parsed once per process (and file version):
    the 250k-piece file takes ~1 s to parse, which each round of a long sync paid before cutting its first file
    until the fork server its rounds start from loaded it for all of them (appliance/sync/rounds.py)."""
    stat = path.stat()
    key = (path, stat.st_mtime_ns, stat.st_size)
    with _TOKENIZERS_LOCK:
        tok = _TOKENIZERS.get(key)
        if tok is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(path))
            tok.no_truncation()
            tok.no_padding()
            _TOKENIZERS[key] = tok
        return tok


class OnnxEmbedder:
    """Embeds passages and queries with one baked model; safe to share between threads."""

    def __init__(self, spec: ModelSpec, models_dir: Path, threads: int | None = None, *,
                 token_budget: int = DEFAULT_TOKEN_BUDGET, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.spec = spec
        self.models_dir = Path(models_dir)
        self.threads = threads
        self.token_budget = token_budget
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._tokenizer: Tokenizer | None = None
        self._model: TextEmbedding | None = None
        self._window: int | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as how to build it (a sync's round rebuilds it in its child process): the model
        loads there, at first use."""
        return (type(self), (self.spec, self.models_dir, self.threads),
                {"token_budget": self.token_budget, "max_batch": self.max_batch})

    @property
    def dim(self) -> int:
        return self.spec.dim

    @property
    def model_id(self) -> str:
        return self.spec.id

    @property
    def window(self) -> int:
        """The most text tokens one passage may have: max_seq_length minus the special
        tokens minus the passage prefix's tokens."""
        if self._window is None:
            tok = self._ensure_tokenizer()
            specials = len(tok.encode("").ids) - len(tok.encode("", add_special_tokens=False).ids)
            probe = "x"
            prefix = (self.count_tokens(self.spec.passage_prefix + probe) - self.count_tokens(probe)
                      if self.spec.passage_prefix else 0)
            self._window = self.spec.max_seq_length - specials - prefix
        return self._window

    def count_tokens(self, text: str) -> int:
        """Tokens of text in the model's own tokenizer, untruncated, without special tokens."""
        return len(self._ensure_tokenizer().encode(text, add_special_tokens=False).ids)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised; the passage prefix is applied here.

        Raises ModelMissing / ModelCorrupt when the baked model is absent or damaged.
        """
        return self._embed([self.spec.passage_prefix + t for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) float32, L2-normalised; the query prefix is applied here."""
        return self._embed([self.spec.query_prefix + text]).reshape(-1)  # the one row

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 for many queries at once (batched like passages)."""
        return self._embed([self.spec.query_prefix + t for t in texts])

    def load(self) -> None:
        """Load tokenizer and ONNX session now instead of at first use."""
        self._ensure_model()

    # ---------------------------------------------------------------- internals

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        model = self._ensure_model()
        for batch in self._batches(texts):
            vectors = list(model.embed([texts[i] for i in batch], batch_size=len(batch)))
            out[batch] = np.asarray(vectors, dtype=np.float32)
        return out

    def _batches(self, texts: list[str]) -> list[list[int]]:
        """Indices grouped by similar token length, each batch within the padded-token budget."""
        tok = self._ensure_tokenizer()
        limit = self.spec.max_seq_length
        lengths = [min(len(e.ids), limit) for e in tok.encode_batch(texts)]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            # sorted ascending, so the newest member is the longest and sets the padded width
            if current and (len(current) >= self.max_batch or (len(current) + 1) * lengths[i] > self.token_budget):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def tokenizer_file(self) -> Path:
        """The baked model's tokenizer.json (raises ModelCorrupt when the model is not baked)."""
        return check_baked(self.spec, self.models_dir, full=False) / "tokenizer.json"

    def _ensure_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    self._tokenizer = tokenizer_at(self.tokenizer_file())
        return self._tokenizer

    def _ensure_model(self) -> TextEmbedding:
        if self._model is None:
            tok = self._ensure_tokenizer()
            with self._lock:
                if self._model is None:
                    self._model = self._load_model(tok)
        return self._model

    def _load_model(self, tok: Tokenizer) -> TextEmbedding:
        TextEmbedding = import_fastembed()
        path = check_baked(self.spec, self.models_dir, full=False)
        model = TextEmbedding(
            model_name=_register(self.spec),
            specific_model_path=str(path),
            cache_dir=_fastembed_cache_dir(),
            threads=self.threads,
            lazy_load=True,
            # onnxruntime's CPU arena grows to the peak batch and never returns it
            # to the OS; in a long-lived server that peak would stick.
            enable_cpu_mem_arena=False,
        )
        pad = _pad_token(path)
        pad_id = tok.token_to_id(pad)
        if pad_id is None:
            raise ModelCorrupt(f"Model {self.spec.id}: its tokenizer has no id for the pad token {pad!r}",
                               hint=Hint("Re-bake it: {}.", NextAction("models bake", f"{self.spec.id} --force")))
        # fastembed's OnnxTextEmbedding, patched below: its tokenizer and session options have no public hook.
        # Ours goes in before the session loads, so fastembed finds a tokenizer and does not parse
        # tokenizer.json a second time (~0.7 s of every model load: 250,000 pieces).
        inner: Any = model.model
        inner.tokenizer = _BatchTokenizer(tok, self.spec.max_seq_length, pad_id)
        fastembed_options = inner.add_extra_session_options

        def session_options(options: Any, extra: dict[str, Any]) -> None:
            fastembed_options(options, extra)
            # onnxruntime's idle threads spin for work by default. During a sync the
            # conversion worker needs a core, and spinning threads take it from
            # it: embedding under such load ran 8 chunks/s spinning, 9.5 not.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")

        inner.add_extra_session_options = session_options  # fastembed exposes no other way in
        inner.load_onnx_model()
        return model
