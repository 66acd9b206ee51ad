"""The `strat` command line: one verb per job, one module per group of verbs.

- `train.py`: check, config-reference, init-model, pretrain, sft, train
- `eval.py`: eval
- `export.py`: export
- `play.py`: play
- `results.py`: results summarize, results table
- `bench.py`: bench
- `cluster.py`: plan, submit, jobs
- `app.py`: the Typer app and `main`, which prints user errors as one line with an exit status
"""

from __future__ import annotations

from strat.cli.app import app, main
from strat.cli.bench import bench
from strat.cli.cluster import jobs_command, plan_command, submit_command
from strat.cli.eval import eval_command
from strat.cli.export import export_command
from strat.cli.play import play
from strat.cli.results import results_app
from strat.cli.train import check, config_reference, init_model, pretrain, sft, train

app.command()(check)
app.command("config-reference")(config_reference)
app.command("init-model")(init_model)
app.command()(pretrain)
app.command()(sft)
app.command()(train)
app.command("eval")(eval_command)
app.command("export")(export_command)
app.command()(play)
app.command()(bench)
app.command("plan")(plan_command)
app.command("submit")(submit_command)
app.command("jobs")(jobs_command)
app.add_typer(results_app, name="results")

__all__ = ["app", "main"]
