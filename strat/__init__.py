"""Strat: train LLM agents to reason strategically in multi-agent games.

Importing it changes nothing in the process: the environment defaults (`strat.process_env`) are applied where a
process starts (the `strat` command, Ray actors' runtime env, tests' conftest, scripts)."""

__version__ = "0.1.0"
