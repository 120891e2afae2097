"""tests/conftest.py's environment fixture: what a test leaves in os.environ, the next test does not see.

`monkeypatch.delenv(name, raising=False)` of a variable that is not set records nothing to restore, so a
variable the code under test then sets (the CLI's DAGSTER_HOME, the batching event log's
DAGSTER_EVENT_BATCH_SIZE) outlived the test, and later tests' results depended on the order they ran in.
The first two tests below run in this order. The last: each test has a MEDDEVKG_HOME of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from meddevkg_core.home import home_dir
from meddevkg_dagster.cli import main

SET_BY_THE_CLI = ("DAGSTER_HOME", "DAGSTER_EVENT_BATCH_SIZE")
AT_IMPORT = {name: os.environ.get(name) for name in SET_BY_THE_CLI}


def test_the_cli_sets_the_instance_variables_that_monkeypatch_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    for name in SET_BY_THE_CLI:
        monkeypatch.delenv(name, raising=False)
    assert main(["partitions"]) == 0  # the instance home, whose dagster.yaml names the batching event log
    assert os.environ["DAGSTER_HOME"] == str(tmp_path / "dagster_home")
    assert "DAGSTER_EVENT_BATCH_SIZE" in os.environ


def test_the_next_test_starts_from_the_environment_it_had():
    assert {name: os.environ.get(name) for name in SET_BY_THE_CLI} == AT_IMPORT


def test_each_test_has_a_meddevkg_home_of_its_own(tmp_path_factory):
    # Unset, it would be the clone's ./.meddevkg, shared by every test and every run.
    home = Path(os.environ["MEDDEVKG_HOME"])
    assert home.is_dir() and not any(home.iterdir())
    assert home.is_relative_to(tmp_path_factory.getbasetemp())
    assert home_dir() == home
