"""Model architectures shared by every domain: dense and MoE catalogues, Hugging Face configs.

Modules:

- ``dense``: Dense transformer model specs and their per-request work (FLOPs, bytes).
- ``hf_config``: Models from a Hugging Face ``config.json``: dense (Llama, Mistral, Qwen2/Qwen3)
  and MoE
- ``moe``: MoE model architectures: sizes from published configs, work and bytes by formula.
- ``dense.yaml``: the shipped catalogue, every entry with its source
- ``moe.yaml``: the shipped catalogue, every entry with its source
"""
