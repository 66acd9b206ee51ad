"""Safety: weights only from safetensors, no unrestricted pickle, no remote code unless asked, a
local dashboard bound to 127.0.0.1, no secrets in saved configs or logs."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from strat.config import ExperimentConfig, save_resolved
from strat.config_loading import load_config

from .conftest import DEFAULT, ROOT

SOURCES = sorted(p for folder in ("strat", "games", "bench", "experiments") for p in (ROOT / folder).rglob("*.py"))
SECRET = "hf_THIS_IS_A_TEST_SECRET_8d1c"


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def test_nothing_is_loaded_through_unrestricted_pickle() -> None:
    problems = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                if any(n and n.split(".")[0] in {"pickle", "dill", "joblib", "cloudpickle", "shelve"} for n in names):
                    problems.append(f"{path.name}:{node.lineno} imports a pickle loader")
        for call in _calls(tree):
            name = _dotted(call.func)
            if name.endswith("torch.load") and _keyword(call, "weights_only") is not True:
                problems.append(f"{path.name}:{call.lineno} torch.load without weights_only=True")
            if name.endswith(("np.load", "numpy.load")) and _keyword(call, "allow_pickle") is True:
                problems.append(f"{path.name}:{call.lineno} np.load(allow_pickle=True)")
            if _keyword(call, "trust_remote_code") is True:
                problems.append(f"{path.name}:{call.lineno} trust_remote_code=True hard-coded")
    assert not problems, problems


def test_model_weights_load_only_from_safetensors() -> None:
    problems = []
    for path in SOURCES:
        for call in _calls(ast.parse(path.read_text(), str(path))):
            name = _dotted(call.func)
            if name.startswith("AutoModel") and name.endswith("from_pretrained") and _keyword(call, "use_safetensors") is not True:
                problems.append(f"{path.name}:{call.lineno} {name} without use_safetensors=True")
            if name == "LLM" and _keyword(call, "load_format") != "safetensors":
                problems.append(f"{path.name}:{call.lineno} vLLM engine without load_format='safetensors'")
    assert not problems, problems


def test_remote_code_is_off_unless_the_config_turns_it_on(tmp_path: Path) -> None:
    assert ExperimentConfig().model.trust_remote_code is False
    assert load_config(DEFAULT, []).model.trust_remote_code is False
    assert load_config(DEFAULT, ["model.trust_remote_code=true"]).model.trust_remote_code is True


def test_local_ray_started_by_strat_binds_the_dashboard_to_localhost(tmp_path: Path, tiny_model_dir: Path) -> None:
    import ray

    from strat.train.trainer import Trainer

    assert not ray.is_initialized()
    trainer = Trainer(load_config(DEFAULT, [f"model.path={tiny_model_dir}", f"run.output_dir={tmp_path}"]), tmp_path)
    trainer._start_ray()
    try:
        node = ray._private.worker.global_worker.node
        url = node.address_info.get("webui_url") or ""
        assert url == "" or url.split("//")[-1].startswith("127.0.0.1"), url
        assert node._ray_params.dashboard_host == "127.0.0.1"
    finally:
        trainer._stop_ray()


def test_no_secrets_in_saved_configs_or_command_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "RAY_AUTH_TOKEN", "WANDB_API_KEY"):
        monkeypatch.setenv(key, SECRET)
    config = load_config(DEFAULT, [f"run.output_dir={tmp_path}"])
    save_resolved(config, tmp_path)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    done = subprocess.run([str(Path(sys.executable).parent / "strat"), "check", str(DEFAULT)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and SECRET not in done.stdout + done.stderr
