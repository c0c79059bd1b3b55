"""Models for tests/test_torch_export_transformers.py and tests/test_torch_export_vs_onnx.py: transformers'
GPT-2 and BERT built from small configs (random weights, no downloads), small modules for the ops and errors
they brought up, and recurrent text models. Each `make_*` returns (module, example inputs) as a `torch =`
kernel's make() does."""
from __future__ import annotations

import inspect

import torch
from torch import nn

SEQ = 8
VOCAB = 1000


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(seed))


def _mask() -> torch.Tensor:
    """An attention mask with the last two positions padded."""
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    mask[0, SEQ - 2:] = 0
    return mask


def _gpt2_config(**kw):
    from transformers import GPT2Config
    return GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0,
                      eos_token_id=0, **kw)


def make_gpt2():
    """GPT2Model without the key/value cache: the last hidden state."""
    from transformers import GPT2Model
    torch.manual_seed(0)
    return GPT2Model(_gpt2_config(use_cache=False)), (_ids(),)


def make_gpt2_lm():
    """GPT2LMHeadModel as constructed (use_cache=True): the logits and the new cache's keys and values."""
    from transformers import GPT2LMHeadModel
    from transformers.integrations.executorch import register_dynamic_cache_export_support
    register_dynamic_cache_export_support()  # DynamicCache as a pytree, as transformers' export docs do
    torch.manual_seed(1)
    return GPT2LMHeadModel(_gpt2_config()), (_ids(1),)


def make_bert():
    """BertModel with an attention mask: the last hidden state and the pooled output."""
    from transformers import BertConfig, BertModel
    torch.manual_seed(2)
    config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                        vocab_size=VOCAB, max_position_embeddings=64)
    return BertModel(config), (_ids(2), _mask())


def make_gpt2_batch():
    """GPT2Model (use_cache=False) with a symbolic batch: torch's own decomposition of
    scaled_dot_product_attention left strides under which GPT-2's .view of the attention output failed inside
    run_decompositions() (pytorch/pytorch#136543); the frontend keeps the op whole (capture.KEEP_WHOLE)."""
    module, (ids,) = make_gpt2()
    return module, (torch.cat([ids, _ids(3)]),), ({0: torch.export.Dim("batch", min=1, max=64)},)


def make_bert_batch():
    """BertModel with a padding mask, the batch a dim of both inputs."""
    module, (ids, mask) = make_bert()
    mask2 = torch.ones_like(mask)
    mask2[0, :3] = 0
    batch = torch.export.Dim("batch", min=1, max=64)
    return module, (torch.cat([ids, _ids(4)]), torch.cat([mask, mask2])), ({0: batch}, {0: batch})


def make_bert_layers():
    """BertModel's last hidden state from token ids alone (no padding), the batch symbolic
    (tests/test_torch_export_vs_onnx.py: the same IR from ONNX)."""
    module, (ids, _) = make_bert()

    class Hidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = module

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state
    return Hidden().eval(), (torch.cat([ids, _ids(5)]),), ({0: torch.export.Dim("batch", min=1, max=64)},)


TRANSFORMERS = {"gpt2": make_gpt2, "gpt2_lm": make_gpt2_lm, "bert": make_bert}
BATCHED = {"gpt2_batch": make_gpt2_batch, "bert_batch": make_bert_batch}


# ---- scaled_dot_product_attention ------------------------------------------------------------------------

class Attention(nn.Module):
    """F.scaled_dot_product_attention(q, k, v, mask, is_causal=..., scale=..., enable_gqa=...), kept whole by
    the frontend (capture.KEEP_WHOLE)."""

    def __init__(self, causal: bool = False, scale: float | None = None, gqa: bool = False):
        super().__init__()
        self.causal, self.scale, self.gqa = causal, scale, gqa

    def forward(self, q, k, v, mask=None):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal,
                                                          scale=self.scale, enable_gqa=self.gqa)


def _qkv(seed: int, heads_kv: int = 4, lq: int = 5, lk: int = 7):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 4, lq, 8, generator=g), torch.randn(2, heads_kv, lk, 8, generator=g),
            torch.randn(2, heads_kv, lk, 6, generator=g))


def make_sdpa_plain():
    return Attention(), _qkv(20)


def make_sdpa_bool_mask():
    """A boolean mask broadcast over the heads; the last query row attends to nothing (0, as torch's)."""
    mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(21)) > 0.4
    mask[:, :, -1] = False
    return Attention(), (*_qkv(21), mask)


def make_sdpa_float_mask():
    """An additive float mask of one matrix for every batch and head, and a scale of 0.3."""
    mask = torch.randn(5, 7, generator=torch.Generator().manual_seed(22))
    mask[:, 0] = float("-inf")
    return Attention(scale=0.3), (*_qkv(22), mask)


def make_sdpa_causal():
    """is_causal with more keys than queries (torch's mask is the top-left triangle: query i sees keys <= i)."""
    return Attention(causal=True, scale=0.5), _qkv(23)


def make_sdpa_gqa():
    """enable_gqa: 4 query heads share 2 key/value heads (each repeated twice, as repeat_interleave)."""
    return Attention(gqa=True), _qkv(24, heads_kv=2)


SDPA = {"sdpa_plain": make_sdpa_plain, "sdpa_bool_mask": make_sdpa_bool_mask, "sdpa_float_mask": make_sdpa_float_mask,
        "sdpa_causal": make_sdpa_causal, "sdpa_gqa": make_sdpa_gqa}


# ---- ops -------------------------------------------------------------------------------------------------

class CatEmpty(nn.Module):
    """torch.cat skips 1-D empty tensors whatever the other operands' rank (a key/value cache starts so)."""

    def forward(self, x):
        empty = torch.tensor([])
        return torch.cat([empty, x, empty, x], dim=-2), torch.cat([x, torch.tensor([])], dim=0)


class Bitwise(nn.Module):
    """&, |, ^, ~ on bool masks and on integers (int64, uint8), with tensors and scalars."""

    def forward(self, x, i):
        a, b = x > 0, x < 0.5
        u = (i % 200).to(torch.uint8)
        return (a & b, a | b, a ^ b, ~a, a & True, i & 6, i | 9, i ^ -3, ~i, u & 0x0F, ~u, u ^ u.flip(1))


def make_cat_empty():
    return CatEmpty(), (torch.randn(2, 3, 4),)


def make_bitwise():
    g = torch.Generator().manual_seed(3)
    return Bitwise(), (torch.randn(3, 5, generator=g), torch.randint(-50, 50, (3, 5), generator=g))


OPS = {"cat_empty": make_cat_empty, "bitwise": make_bitwise}


# ---- recurrent -------------------------------------------------------------------------------------------

class TextLSTM(nn.Module):
    """Embedding, LSTM, a linear head on the last step."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.lstm = nn.LSTM(32, 48, batch_first=True)
        self.fc = nn.Linear(48, 10)

    def forward(self, ids):
        h, _ = self.lstm(self.emb(ids))
        return self.fc(h[:, -1])


class TextGRU(nn.Module):
    """Two bidirectional GRU layers without biases, and their final states."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.gru = nn.GRU(16, 24, num_layers=2, bidirectional=True, bias=False)

    def forward(self, ids):
        y, h = self.gru(self.emb(ids))
        return y, h


def make_text_lstm():
    torch.manual_seed(4)
    return TextLSTM(), (_ids(4),)


def make_text_gru():
    torch.manual_seed(5)
    return TextGRU(), (_ids(5).T,)


RECURRENT = {"text_lstm": make_text_lstm, "text_gru": make_text_gru}


class CausalScores(nn.Module):
    """Attention scores under a causal mask made from arange at every call, as transformers' models do; the
    weight is used transposed (a computation on a weight, which stays one)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(SEQ, SEQ, generator=torch.Generator().manual_seed(6)))

    def forward(self, x):
        pos = torch.arange(SEQ)
        mask = (pos[None, :] <= pos[:, None]) & torch.ones(SEQ, SEQ, dtype=torch.bool)
        scores = x @ self.w.t()
        return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def make_causal_scores():
    return CausalScores(), (torch.randn(2, SEQ, SEQ, generator=torch.Generator().manual_seed(7)),)


# ---- errors ----------------------------------------------------------------------------------------------

class UsesHelper(nn.Module):
    def forward(self, x):
        from torch_export_helpers import running_max
        return running_max(x) * 2  # the caller's line


def make_helper():
    return UsesHelper(), (torch.randn(2, 5),)


def _define_boom():
    """kstest::boom: composite, so torch.export keeps it and run_decompositions() lowers it, which fails."""
    try:
        lib = torch.library.Library("kstest", "DEF")
    except RuntimeError:  # defined already (this file is imported twice: by the test and by ksbuild)
        return
    lib.define("boom(Tensor x) -> Tensor")
    lib.impl("boom", _boom, "CompositeImplicitAutograd")
    _LIBS.append(lib)


_LIBS: list = []


def _boom(x):
    if any(f.function == "run_decompositions" for f in inspect.stack()):
        raise ValueError("boom cannot be lowered")
    return x * 2


class Boom(nn.Module):
    def forward(self, x):
        return torch.ops.kstest.boom(x) + 1  # boom's line


def make_boom():
    _define_boom()
    return Boom(), (torch.randn(3),)


class Opaque:
    """A container torch's pytree does not know."""

    def __init__(self, t):
        self.t = t


class ReturnsOpaque(nn.Module):
    def forward(self, x):
        return x + 1, Opaque(x)


def make_opaque():
    return ReturnsOpaque(), (torch.randn(3),)


# ---- more transformers (tests/test_torch_export_vs_onnx.py: the same IR from both frontends) --------------

class LastHidden(nn.Module):
    """A transformers model's last hidden state from one input (token ids, or pixel_values for a ViT)."""

    def __init__(self, model, key: str = "input_ids"):
        super().__init__()
        self.m, self.key = model, key
        self.eval()  # (torch.onnx.export leaves every submodule in this module's mode)

    def forward(self, x):
        return self.m(**{self.key: x}).last_hidden_state


def _batch():
    return ({0: torch.export.Dim("batch", min=1, max=64)},)


def make_distilbert_layers():
    """DistilBertModel (2 layers of 64, 4 heads), token ids alone, the batch symbolic."""
    from transformers import DistilBertConfig, DistilBertModel
    torch.manual_seed(8)
    config = DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=VOCAB,
                              max_position_embeddings=64)
    return LastHidden(DistilBertModel(config)), (torch.cat([_ids(8), _ids(9)]),), _batch()


def make_vit_layers():
    """ViTModel (2 layers of 48, 3 heads, 16x16 images of 8x8 patches), no pooler, the batch symbolic."""
    from transformers import ViTConfig, ViTModel
    torch.manual_seed(9)
    config = ViTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=96,
                       image_size=16, patch_size=8)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(10))
    return LastHidden(ViTModel(config, add_pooling_layer=False), "pixel_values"), (x,), _batch()


LAYERS = {"distilbert": make_distilbert_layers, "vit": make_vit_layers}


def make_llama_layers():
    """LlamaModel (2 layers of 64, 4 query heads sharing 2 key/value heads, RMSNorm, rotary embeddings, SwiGLU),
    token ids alone, the batch symbolic: its rotary cos/sin tables come from the `inv_freq` buffer."""
    from transformers import LlamaConfig, LlamaModel
    torch.manual_seed(11)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, use_cache=False)
    return LastHidden(LlamaModel(config)), (torch.cat([_ids(11), _ids(12)]),), _batch()
