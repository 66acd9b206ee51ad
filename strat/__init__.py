"""Strat: train LLM agents to reason strategically in multi-agent games."""

from strat._env import apply_defaults

apply_defaults()

__version__ = "0.1.0"
