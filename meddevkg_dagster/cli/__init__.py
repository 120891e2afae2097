"""The `meddevkg` command (`main`), one module per kind of command.

`dagster_instance`: `demo` and `partitions`, on the Dagster instance the UI shows; `pipeline_commands`: `run`,
`benchmark` and the other commands on a corpus directory, with `pipeline_setup`, the settings and models they
start from; `applications`: the paper's applications on a finished run; `command_line`: the arguments of every
command, and `main`. Here: what the entry point, scripts and tests import.
"""

from meddevkg_dagster.cli.command_line import main
from meddevkg_dagster.cli.dagster_instance import (
    ensure_store_schema,
    materialize_corpus,
    remove_partitions,
    run_failure,
    ui_command,
    ui_hint,
)
from meddevkg_dagster.cli.pipeline_commands import backfill_home
from meddevkg_dagster.cli.pipeline_setup import CROSS_ENCODER_BACKENDS, ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS

__all__ = ["CROSS_ENCODER_BACKENDS", "ENTITY_EXTRACTORS", "ENTITY_EXTRACTOR_ENV", "backfill_home",
           "ensure_store_schema", "main", "materialize_corpus", "remove_partitions", "run_failure", "ui_command",
           "ui_hint"]
