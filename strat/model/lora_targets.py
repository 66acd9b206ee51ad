"""The linear layers that get LoRA adapters by default: one torch-free constant that the config schema
(`learner.lora.target_modules`) and the model builder (`strat.model.build.LoraSettings`) share."""

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Qwen and Llama names."""
