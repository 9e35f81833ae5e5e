"""An independent Gemma 3 forward pass in numpy (float64), as llama.cpp and
Hugging Face define the model. Shared by `gemma3_ref.py` (a small random
model) and `gemma3_exact.py` (the real 270M model).

Per layer, with `swa` every layer but every sixth (5, 11, 17, ...):

    h = rms_norm(x) * attn_norm
    q, k = rms_norm(per head) * attn_{q,k}_norm, then NeoX RoPE at
           base_swa and scale 1 on sliding layers, base and rope_scale on
           global ones
    scores = q·k * attn_scale, masked to j <= i (and i - j < n_swa if swa)
    x += rms_norm(attention · Wo) * post_attention_norm
    x += rms_norm((gelu_tanh(h' Wgate) * h' Wup) Wdown) * post_ffw_norm,
           h' = rms_norm(x) * ffn_norm
logits = rms_norm(x) * output_norm · token_embd (tied), the input
embeddings being token_embd rows times sqrt(n_embd).
"""
import numpy as np


def forward(weight, embeddings, hp, ids):
    """Logits (positions × vocab, float64) of `ids` at positions 0...

    weight(name): a float64 array of a tensor, rows × cols as GGUF stores it.
    embeddings: token_embd as a (vocab × n_embd) array (any float type).
    hp: n_embd, n_head, n_head_kv, head_dim, n_layer, eps, n_swa, base,
    base_swa, rope_scale, attn_scale.
    """
    n, hd = len(ids), hp["head_dim"]
    H, HKV, eps = hp["n_head"], hp["n_head_kv"], hp["eps"]
    pos = np.arange(n)

    def rms_norm(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope_neox(x, base, scale):
        # Halves (x[i], x[i + hd/2]) rotate by pos · scale · base^(-2i/hd).
        half = hd // 2
        theta = (pos * scale)[:, None] * base ** (-np.arange(half) * 2 / hd)
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def gelu_tanh(x):
        # As ggml's CPU defines it (GGML_GELU_FP16): of the input rounded
        # to f16, rounded to f16; 0 at or below -10, the input at or above 10.
        h = x.astype(np.float32).astype(np.float16).astype(np.float64)
        y = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
        y = y.astype(np.float16).astype(np.float64)
        return np.where(x <= -10, 0.0, np.where(x >= 10, x, y))

    x = embeddings[ids].astype(np.float64) * np.sqrt(hp["n_embd"])
    for i in range(hp["n_layer"]):
        W = lambda name: weight(f"blk.{i}.{name}")  # noqa: E731
        swa = hp["n_swa"] > 0 and i % 6 < 5
        base, scale = (hp["base_swa"], 1.0) if swa else (hp["base"], hp["rope_scale"])
        h = rms_norm(x, W("attn_norm.weight").reshape(-1))
        q = (h @ W("attn_q.weight").T).reshape(n, H, hd)
        k = (h @ W("attn_k.weight").T).reshape(n, HKV, hd)
        v = (h @ W("attn_v.weight").T).reshape(n, HKV, hd)
        q = rope_neox(rms_norm(q, W("attn_q_norm.weight").reshape(-1)), base, scale)
        k = rope_neox(rms_norm(k, W("attn_k_norm.weight").reshape(-1)), base, scale)
        d = pos[:, None] - pos[None, :]
        visible = (d >= 0) & ((d < hp["n_swa"]) | (not swa))
        att = np.empty((n, H, hd))
        for head in range(H):
            kv = head // (H // HKV)
            s = np.where(visible, q[:, head] @ k[:, kv].T * hp["attn_scale"], -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            att[:, head] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        o = att.reshape(n, H * hd) @ W("attn_output.weight").T
        x = x + rms_norm(o, W("post_attention_norm.weight").reshape(-1))
        h = rms_norm(x, W("ffn_norm.weight").reshape(-1))
        f = gelu_tanh(h @ W("ffn_gate.weight").T) * (h @ W("ffn_up.weight").T)
        x = x + rms_norm(f @ W("ffn_down.weight").T, W("post_ffw_norm.weight").reshape(-1))
    x = rms_norm(x, weight("output_norm.weight").reshape(-1))
    # The tied output, a slice of the vocabulary at a time (it is large).
    out = np.empty((n, embeddings.shape[0]))
    for r in range(0, embeddings.shape[0], 1 << 15):
        out[:, r : r + (1 << 15)] = x @ embeddings[r : r + (1 << 15)].astype(np.float64).T
    return out
