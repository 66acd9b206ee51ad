"""What a checkpoint's manifest (`strat/model/manifest.py`) costs: the time to hash every file and write the
COMPLETE marker after a checkpoint's files are written, and the time to verify it before a load, against the time
of the whole checkpoint write; for the default config's tiny model and the 49 M model of the benchmarks.

    python bench/checkpoint_manifest.py [--rounds 3] [--sizes tiny,49M] [--json]

Each checkpoint is a real one, written by `PolicyLearner.save` after one AdamW step (so that the optimizer state
holds both moments, as in a run). The figures are medians over `--rounds` of: the whole save (manifest included),
the manifest's write alone (`manifest.write`: hash every file, write and flush the marker) and a verification
(`manifest.verify`). The files were just written, so they are read from the page cache: a checkpoint read cold
from a disk or a network filesystem adds the read (which the load that follows needs anyway). Hash throughput of
the candidates on 64 MiB in memory is printed too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
import zlib
from pathlib import Path

from strat.process_env import apply_defaults

apply_defaults()  # one OpenMP thread and quiet logs, before torch is imported

import torch  # noqa: E402

from strat.benchmarks.figures import MEDIUM_MODEL  # noqa: E402
from strat.model import manifest, tiny  # noqa: E402
from strat.model.checkpoint import checkpoint_dir  # noqa: E402
from strat.train.learner import LearnerSettings, PolicyLearner  # noqa: E402


def hash_rates(size: int = 64 * 2**20) -> dict[str, float]:
    """MiB/s of sha256, blake2b, sha1, md5 and crc32 over `size` random bytes in memory, 1 MiB chunks."""
    data = os.urandom(size)
    rates = {}
    for name in ("sha256", "blake2b", "sha1", "md5", "crc32"):
        started = time.perf_counter()
        if name == "crc32":
            value = 0
            for i in range(0, size, 2**20):
                value = zlib.crc32(data[i : i + 2**20], value)
        else:
            digest = hashlib.new(name)
            for i in range(0, size, 2**20):
                digest.update(data[i : i + 2**20])
        rates[name] = size / 2**20 / (time.perf_counter() - started)
    return rates


def measure(model_dir: Path, rounds: int) -> dict[str, float]:
    learner = PolicyLearner(model_dir, LearnerSettings())
    for param in learner.model.parameters():
        param.grad = torch.zeros_like(param)
    learner.optimizer.step()  # both AdamW moments exist, as in a run's checkpoint
    save, write, verify = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder)
        for step in range(1, rounds + 1):
            started = time.perf_counter()
            learner.save(run_dir, step, {"baseline": {}}, keep=1)
            save.append(time.perf_counter() - started)
            written = checkpoint_dir(run_dir, step)
            started = time.perf_counter()
            manifest.write(written, step)
            write.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert manifest.verify(written, step).status == "verified"
            verify.append(time.perf_counter() - started)
        files = manifest.build(written, rounds).files
    params = sum(p.numel() for p in learner.model.parameters())
    return {"params_m": params / 1e6, "files": len(files), "mib": sum(f.size for f in files) / 2**20,
            "save_s": statistics.median(save), "manifest_write_s": statistics.median(write),
            "verify_s": statistics.median(verify)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="tiny,49M")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = {"tiny": lambda: tiny.ensure("kuhn_poker", seed=0),
              "49M": lambda: tiny.ensure("kuhn_poker", seed=0, settings=MEDIUM_MODEL)}
    out = {"hash_mib_per_s": hash_rates()}
    for size in args.sizes.split(","):
        out[size] = measure(models[size](), args.rounds)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print("hash MiB/s (64 MiB in memory): " + ", ".join(f"{k} {v:.0f}" for k, v in out["hash_mib_per_s"].items()))
    print("| model | files | MiB | save s (all) | manifest write s | verify s |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        r = out[size]
        print(f"| {size} ({r['params_m']:.1f} M) | {r['files']} | {r['mib']:.1f} | {r['save_s']:.2f} | "
              f"{r['manifest_write_s']:.3f} | {r['verify_s']:.3f} |")


if __name__ == "__main__":
    main()
