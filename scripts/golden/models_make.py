#!/usr/bin/env python3
"""Golden tiny models for tests/unit/runner (the CPU reference runner is checked against them).

Builds small random Qwen2 / Llama models with transformers, saves them with save_pretrained
(safetensors), then reloads each one from disk in fp32 (so the reference runs on exactly the
bf16/fp16-rounded weights the C++ runner reads) and records, per prompt:
  - the fp32 logits of the last prompt position (the first decode step), 6 significant digits;
  - 12 greedy tokens (argmax over full fp32 forwards, cross-checked with model.generate);
  - the smallest top1-top2 logit margin along the greedy path (how robust exact-token checks are).
Weights are drawn with scales that give logits of O(1..10), so greedy margins are far above
fp32 accumulation noise (transformers' default init of std 0.02 makes near-ties everywhere).

Everything runs on the CPU in fp32 with eager attention: no TF32, no fused kernels.

usage: models_make.py OUT_DIR      (writes OUT_DIR/<case>/ and OUT_DIR/expected.json)
"""
import json
import math
import os
import sys

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

PROMPT_LENGTHS = [1, 15, 16, 17, 33, 70]  # straddle page size 16 and chunk sizes 7/16/64
NEW_TOKENS = 12

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small, so that head_dim 32's wavelengths fall in all three llama3 bands (kept, smoothed,
    # divided by factor).
    "original_max_position_embeddings": 32,
}

CASES = [
    dict(name="qwen2_tied_bf16_sharded", arch="qwen2", dtype=torch.bfloat16, tied=True,
         shard="60KB", vocab=320, hidden=64, inter=128, layers=2, heads=4, kv_heads=2,
         theta=1000000.0, eps=1e-6, seed=1),
    dict(name="qwen2_untied_fp16_gqa4", arch="qwen2", dtype=torch.float16, tied=False,
         shard=None, vocab=320, hidden=64, inter=128, layers=2, heads=8, kv_heads=2,
         theta=10000.0, eps=1e-6, seed=2),
    dict(name="llama_untied_bf16_llama3rope", arch="llama", dtype=torch.bfloat16, tied=False,
         shard=None, vocab=288, hidden=64, inter=96, layers=3, heads=4, kv_heads=2,
         head_dim=32, theta=10000.0, eps=1e-5, seed=3, scaling=LLAMA3_SCALING),
    dict(name="llama_tied_fp32", arch="llama", dtype=torch.float32, tied=True, shard=None,
         vocab=301, hidden=64, inter=128, layers=2, heads=4, kv_heads=2, theta=500000.0,
         eps=1e-5, seed=4),
]


def llama3_inv_freq(theta, dim, s):
    """transformers' _compute_llama3_parameters, written out independently."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    low_wl = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wl = s["original_max_position_embeddings"] / s["high_freq_factor"]
    wl = 2 * math.pi / inv
    out = torch.where(wl > low_wl, inv / s["factor"], inv)
    smooth = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / (
        s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * out / s["factor"] + smooth * out
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(medium, smoothed, out)


def make_config(c):
    common = dict(vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["inter"],
                  num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                  num_key_value_heads=c["kv_heads"], max_position_embeddings=256,
                  rms_norm_eps=c["eps"], tie_word_embeddings=c["tied"], bos_token_id=1,
                  eos_token_id=2, hidden_act="silu")
    if c["arch"] == "qwen2":
        attempts = [dict(rope_theta=c["theta"]),
                    dict(rope_parameters={"rope_type": "default", "rope_theta": c["theta"]})]
        cls = Qwen2Config
    else:
        if "head_dim" in c:
            common["head_dim"] = c["head_dim"]
        if "scaling" in c:
            attempts = [dict(rope_theta=c["theta"], rope_scaling=dict(c["scaling"])),
                        dict(rope_parameters=dict(c["scaling"], rope_theta=c["theta"]))]
        else:
            attempts = [dict(rope_theta=c["theta"]),
                        dict(rope_parameters={"rope_type": "default", "rope_theta": c["theta"]})]
        cls = LlamaConfig
    return cls, common, attempts


def expected_inv_freq(c):
    hd = c.get("head_dim", c["hidden"] // c["heads"])
    if "scaling" in c:
        return llama3_inv_freq(c["theta"], hd, c["scaling"])
    return 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))


def build_model(c):
    """A model whose rotary embedding really has the inv_freq we intend (tries both the
    transformers 4 and 5 spellings of rope settings)."""
    cls, common, attempts = make_config(c)
    want = expected_inv_freq(c)
    errors = []
    for extra in attempts:
        try:
            cfg = cls(**common, **extra)
            model_cls = Qwen2ForCausalLM if c["arch"] == "qwen2" else LlamaForCausalLM
            torch.manual_seed(c["seed"])
            model = model_cls(cfg).float().eval()
            got = model.model.rotary_emb.inv_freq.float().cpu()
            if got.shape == want.shape and torch.allclose(got, want, rtol=1e-6, atol=0):
                return model
            errors.append(f"{extra}: inv_freq {got.tolist()} != {want.tolist()}")
        except Exception as e:  # noqa: BLE001 — report every attempt
            errors.append(f"{extra}: {type(e).__name__}: {e}")
    raise RuntimeError(f"{c['name']}: no config spelling gives the intended rope:\n" +
                       "\n".join(errors))


@torch.no_grad()
def init_weights(model, c):
    g = torch.Generator().manual_seed(1000 + c["seed"])
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
        elif name.endswith(".bias"):
            p.copy_(0.2 * torch.randn(p.shape, generator=g))
        elif "embed_tokens" in name:
            # Tied: a smaller embedding, or the logit of the input token (|e|^2) dominates and
            # greedy repeats one token forever.
            p.copy_((0.5 if c["tied"] else 1.0) * torch.randn(p.shape, generator=g))
        elif "lm_head" in name:
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
        else:  # Linear [out, in]: unit-variance outputs
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    if c["tied"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def sig6(x):
    return float(f"{x:.6g}")


@torch.no_grad()
def reference(model_dir, c, prompts):
    model_cls = Qwen2ForCausalLM if c["arch"] == "qwen2" else LlamaForCausalLM
    try:
        m = model_cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = model_cls.from_pretrained(model_dir, torch_dtype=torch.float32,
                                      attn_implementation="eager")
    m.eval()
    assert m.lm_head.weight.dtype == torch.float32
    got = m.model.rotary_emb.inv_freq.float().cpu()
    assert torch.allclose(got, expected_inv_freq(c), rtol=1e-6, atol=0), (
        f"{model_dir}: reloaded rope differs from the intended one: {got.tolist()}")
    out = []
    for ids in prompts:
        seq = list(ids)
        first_logits = None
        margins = []
        for step in range(NEW_TOKENS):
            logits = m(torch.tensor([seq])).logits[0, -1].float()
            if step == 0:
                first_logits = logits.clone()
            top2 = torch.topk(logits, 2).values
            margins.append(float(top2[0] - top2[1]))
            seq.append(int(torch.argmax(logits)))
        greedy = seq[len(ids):]
        gen_agrees = None
        try:
            gc = transformers.GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS,
                                               eos_token_id=None, pad_token_id=0)
            gen = m.generate(torch.tensor([ids]), generation_config=gc,
                             attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            gen_agrees = gen[0, len(ids):].tolist() == greedy
        except Exception as e:  # noqa: BLE001
            print(f"  generate failed ({type(e).__name__}: {e}); manual greedy kept")
        out.append({
            "prompt": list(ids),
            "greedy": greedy,
            "generate_agrees": gen_agrees,
            "min_greedy_margin": min(margins),
            "first_logits": [sig6(v) for v in first_logits.tolist()],
        })
        print(f"  len {len(ids):3d}: greedy {greedy} margin {min(margins):.4f} "
              f"generate_agrees {gen_agrees}")
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    expected = {"transformers_version": transformers.__version__,
                "torch_version": torch.__version__, "new_tokens": NEW_TOKENS, "models": {}}
    failures = []
    for c in CASES:
        print(c["name"])
        try:
            make_case(c, out_dir, expected)
        except Exception as e:  # noqa: BLE001 — keep the other cases
            import traceback
            traceback.print_exc()
            failures.append(f"{c['name']}: {type(e).__name__}: {e}")
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
        f.write("\n")
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))


def make_case(c, out_dir, expected):
    model = build_model(c)
    init_weights(model, c)
    model = model.to(c["dtype"])
    d = os.path.join(out_dir, c["name"])
    kw = {"safe_serialization": True}
    if c["shard"]:
        kw["max_shard_size"] = c["shard"]
    try:
        model.save_pretrained(d, **kw)
    except TypeError:
        kw.pop("safe_serialization")
        model.save_pretrained(d, **kw)
    files = sorted(os.listdir(d))
    print("  files:", files)
    if c["shard"]:
        assert "model.safetensors.index.json" in files, files
        assert sum(f.endswith(".safetensors") for f in files) >= 2, files
    g = torch.Generator().manual_seed(77 + c["seed"])
    prompts = [torch.randint(0, c["vocab"], (n,), generator=g).tolist()
               for n in PROMPT_LENGTHS]
    expected["models"][c["name"]] = {"arch": c["arch"], "dtype": str(c["dtype"]),
                                    "tied": c["tied"], "cases": reference(d, c, prompts)}
    with open(os.path.join(d, "config.json")) as f:
        print("  config.json:", f.read().replace("\n", " "))


if __name__ == "__main__":
    main()
