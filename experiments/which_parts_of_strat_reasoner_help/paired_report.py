"""Arms kept in different summary folders, or under the same arm name, compared paired by seed: the ablation table
(`strat.eval.summaries.ablation_section`) with each arm named on the command line.

    python experiments/which_parts_of_strat_reasoner_help/paired_report.py --reference depth1
        --arm depth1=docs/results/scoring:targets-segment-state
        --arm depth2=docs/results/depth_scoring:targets-segment-state [--seeds 0,1,2,3,4]

`--arm LABEL=FOLDER[:ARM]` takes the summaries in FOLDER (those of arm ARM when given) and shows them as LABEL; the
table then gives each arm's final figures over seeds and its paired difference from the `--reference` arm, seed by
seed (the same warm start, deals and evaluation games), with t-based 95% intervals. The summaries themselves are not
changed: the labels live in the report only. Used where a run's arm name does not say what differs, e.g. the same
scoring arm at reasoning depths 1 and 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from strat.eval.summaries import RunSummary, ablation_section, load_summaries


@dataclasses.dataclass(frozen=True)
class ArmSource:
    """Where one labelled arm's summaries are: a folder, and the arm name they were written under (None: all)."""

    label: str
    folder: Path
    arm: str | None = None


def parse_arm(text: str) -> ArmSource:
    """`LABEL=FOLDER[:ARM]`."""
    label, sep, where = text.partition("=")
    if not sep or not label or not where:
        raise argparse.ArgumentTypeError(f"--arm {text!r}: expected LABEL=FOLDER[:ARM]")
    folder, _, arm = where.partition(":")
    return ArmSource(label, Path(folder), arm or None)


def labelled(sources: Sequence[ArmSource], seeds: Sequence[int] | None = None) -> list[RunSummary]:
    """Every source's summaries (of its arm, of `seeds` when given), each relabelled with its source's label."""
    runs = []
    for source in sources:
        if not source.folder.is_dir():
            raise FileNotFoundError(f"--arm {source.label}: no folder {source.folder}")
        found = [run for run in load_summaries(source.folder)
                 if (source.arm is None or run.arm == source.arm) and (seeds is None or run.seed in seeds)]
        if not found:
            raise FileNotFoundError(f"--arm {source.label}: no summaries of arm {source.arm or 'any'} in"
                                    f" {source.folder}")
        runs += [dataclasses.replace(run, arm=source.label) for run in found]
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", type=parse_arm, action="append", required=True, help="LABEL=FOLDER[:ARM]")
    parser.add_argument("--reference", required=True, help="the label every other arm is paired with")
    parser.add_argument("--seeds", type=lambda text: [int(s) for s in text.split(",")], default=None)
    args = parser.parse_args(argv)
    if args.reference not in {source.label for source in args.arm}:
        print(f"--reference {args.reference}: not one of the --arm labels", file=sys.stderr)
        return 2
    try:
        runs = labelled(args.arm, args.seeds)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    where = ", ".join(sorted({f"{source.folder}/" for source in args.arm}))
    print(ablation_section(runs, args.reference, where), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
