"""The linear-layer shapes of a transformer, from its Hugging Face style config, for tuning ahead.

A decoder layer's projections, as nn.Linear runs them (x (tokens, in) @ W.t(), W stored (out, in)):
q (hidden -> heads * head_dim), k and v (hidden -> kv_heads * head_dim), o (heads * head_dim ->
hidden), and the gated MLP's gate and up (hidden -> intermediate) and down (intermediate ->
hidden); each with a bias where the config says its layers have one (``attention_bias`` for q, k,
v and o, ``mlp_bias`` for the MLP, as Llama-style configs name them; q, k and v always for the
model types in QKV_BIAS_MODELS, whose attention has them whatever the config says). Pure Python:
reading a config needs no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Token counts tuned by default: decode batches and prefill chunks.
DEFAULT_TOKENS = (1, 16, 128, 1024, 4096)
# Model types whose q, k and v projections have a bias and o none, with no config key saying so.
QKV_BIAS_MODELS = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})


@dataclass(frozen=True)
class LinearShape:
    """x (M, K) @ W.t() (+ b), W (N, K): M tokens, K inputs, N outputs, and whether nn.Linear has a
    bias (N,)."""

    name: str
    M: int
    N: int
    K: int
    bias: bool = False

    def describe(self) -> str:
        return f"{self.name} {self.M}x{self.N}x{self.K}" + (" with bias" if self.bias else "")


def read_config(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def linear_shapes(config: Mapping[str, Any], tokens: Sequence[int] = DEFAULT_TOKENS) -> list[LinearShape]:
    """Every distinct projection shape of one decoder layer at each token count."""
    try:
        hidden = int(config["hidden_size"])
        intermediate = int(config["intermediate_size"])
        heads = int(config["num_attention_heads"])
    except KeyError as e:
        raise ValueError(f"the model config has no {e.args[0]!r}; it needs hidden_size, intermediate_size and "
                         "num_attention_heads (and optionally num_key_value_heads, head_dim)") from None
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    attention = bool(config.get("attention_bias", False))
    qkv = attention or config.get("model_type") in QKV_BIAS_MODELS
    mlp = bool(config.get("mlp_bias", False))
    layer = (
        ("q", heads * head_dim, hidden, qkv),
        ("k", kv_heads * head_dim, hidden, qkv),
        ("v", kv_heads * head_dim, hidden, qkv),
        ("o", hidden, heads * head_dim, attention),
        ("gate", intermediate, hidden, mlp),
        ("up", intermediate, hidden, mlp),
        ("down", hidden, intermediate, mlp),
    )
    shapes: list[LinearShape] = []
    seen: set[tuple[int, int, int, bool]] = set()
    for m in tokens:
        for name, n, k, bias in layer:
            if (m, n, k, bias) not in seen:
                seen.add((m, n, k, bias))
                shapes.append(LinearShape(name, m, n, k, bias))
    return shapes
