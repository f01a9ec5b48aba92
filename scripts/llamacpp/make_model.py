#!/usr/bin/env python3
"""Write a small random-weight llama GGUF that llama-server loads (no model hub).

The tokenizer is copied field by field from llama.cpp's vocabulary-only file
models/ggml-vocab-llama-spm.gguf (the Llama 1/2 SentencePiece vocabulary, 32,000 tokens); the
hyperparameters are tiny (embedding 64, 2 blocks), so the file is about 17 MB and streams a few
thousand tokens/s per slot on a CPU. A ChatML chat template is attached: llama-server recognises
it without --jinja, and its markers are plain text to this vocabulary, so the chat overhead is
several tokens per message (which headroom's calibration must learn). Weights are seeded: the same
arguments write the same file.

Usage: make_model.py --vocab .../ggml-vocab-llama-spm.gguf --out tiny.gguf [--embd 64 --layers 2]
"""
import argparse
import sys

import numpy as np
import gguf

CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def field_value(field):
    """A reader field's value: a scalar, a str, or a list (strings decoded)."""
    if hasattr(field, "contents"):
        return field.contents()
    t = field.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    if t == gguf.GGUFValueType.ARRAY:
        if field.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    return field.parts[field.data[0]].tolist()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", required=True, help="llama.cpp/models/ggml-vocab-llama-spm.gguf")
    ap.add_argument("--out", required=True)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.embd % a.heads or a.heads % a.kv_heads:
        sys.exit("make_model: --embd must divide by --heads, --heads by --kv-heads")

    r = gguf.GGUFReader(a.vocab)
    f = r.fields
    if field_value(f["tokenizer.ggml.model"]) != "llama":
        sys.exit(f"make_model: {a.vocab} is not an SPM (llama) vocabulary")
    tokens = field_value(f["tokenizer.ggml.tokens"])
    scores = field_value(f["tokenizer.ggml.scores"])
    types = field_value(f["tokenizer.ggml.token_type"])
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name("headroom-tiny-llama")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(a.embd // a.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(n_vocab)

    w.add_tokenizer_model("llama")
    if "tokenizer.ggml.pre" in f:
        w.add_tokenizer_pre(field_value(f["tokenizer.ggml.pre"]))
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(field_value(f["tokenizer.ggml.bos_token_id"]))
    w.add_eos_token_id(field_value(f["tokenizer.ggml.eos_token_id"]))
    w.add_unk_token_id(field_value(f["tokenizer.ggml.unknown_token_id"]))
    for key, add in (("tokenizer.ggml.add_bos_token", w.add_add_bos_token),
                     ("tokenizer.ggml.add_eos_token", w.add_add_eos_token)):
        if key in f:
            add(bool(field_value(f[key])))
    w.add_chat_template(CHATML)

    rng = np.random.default_rng(a.seed)
    head_dim = a.embd // a.heads
    kv = a.kv_heads * head_dim

    def rand(*shape):
        # numpy shape is (rows, cols) = GGUF (ne1, ne0): a weight mapping n_in -> n_out is (n_out, n_in)
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", rand(n_vocab, a.embd))
    w.add_tensor("output_norm.weight", ones(a.embd))
    w.add_tensor("output.weight", rand(n_vocab, a.embd))
    for i in range(a.layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(a.embd))
        w.add_tensor(b + "attn_q.weight", rand(a.embd, a.embd))
        w.add_tensor(b + "attn_k.weight", rand(kv, a.embd))
        w.add_tensor(b + "attn_v.weight", rand(kv, a.embd))
        w.add_tensor(b + "attn_output.weight", rand(a.embd, a.embd))
        w.add_tensor(b + "ffn_norm.weight", ones(a.embd))
        w.add_tensor(b + "ffn_gate.weight", rand(a.ffn, a.embd))
        w.add_tensor(b + "ffn_up.weight", rand(a.ffn, a.embd))
        w.add_tensor(b + "ffn_down.weight", rand(a.embd, a.ffn))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"make_model: wrote {a.out} (vocab {n_vocab}, embd {a.embd}, {a.layers} blocks)")


if __name__ == "__main__":
    main()
