#!/usr/bin/env bash
# Creates the venv of bench/trl_compare.py's TRL side (default bench/.venv-trl): stock TRL GRPOTrainer with the
# torch, transformers and accelerate versions of Strat's own venv, and nothing of vLLM. A second run installs nothing new.
#
#   bash bench/trl_env.sh                      # or: make bench-trl-env
#   TORCH_INDEX=https://download.pytorch.org/whl/cpu bash bench/trl_env.sh   # where no local CPU torch wheel is shipped
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${TRL_VENV:-$here/.venv-trl}"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
index=()
if [[ -n "${TORCH_INDEX:-}" ]]; then
  index=(--extra-index-url "$TORCH_INDEX")
fi

[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "${index[@]}" -r "$here/trl-requirements.txt"
# PyPI's torchvision/torchaudio/triton are CUDA builds that break the CPU torch (as in the Makefile); TRL needs none of them.
"$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
"$venv/bin/python" -c "import torch, transformers, trl; print(f'{trl.__file__}: trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}')"
