"""`meddevkg`: run the pipeline from a terminal.

`demo` materialises the Dagster assets on the bundled corpus (the same job the UI runs);
`run` executes the same core stages on any corpus directory and writes Parquet files.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable

from meddevkg_core.embeddings import BACKENDS, DEVICES
from meddevkg_core.errors import InputError
from meddevkg_dagster.cli.applications import (
    ma_discovery_command,
    recall_rootcause_command,
    trajectory_command,
    views_command,
)
from meddevkg_dagster.cli.dagster_instance import demo_command, partitions_command, pma_number
from meddevkg_dagster.cli.pipeline_commands import (
    bench_backfill_command,
    bench_embed_command,
    bench_extract_command,
    bench_scale_command,
    benchmark_command,
    company_report_command,
    compare_runs_command,
    pairs_cv_command,
    run_command,
    select_devices_command,
)
from meddevkg_dagster.cli.pipeline_setup import CROSS_ENCODER_BACKENDS, ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS


def at_least(smallest: int) -> Callable[[str], int]:
    """An argparse `type`: an int of at least `smallest`, so that a value no command can use (0 runs, 1 fold,
    -1 rows, a seed below 0, which numpy's generators refuse) is refused in argparse's one usage line
    before any work, not in a traceback deep inside, after the corpus is materialised, or by running
    with another value unsaid. Not a number: argparse's own "invalid int value" line, as for `type=int`."""
    def parse(text: str) -> int:
        value = int(text)
        if value < smallest:
            raise argparse.ArgumentTypeError(f"must be at least {smallest}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type by it in "invalid int value: 'x'"
    return parse


def probability(text: str) -> float:
    """An argparse `type`: a float from 0 to 1, so that a threshold no link can meet (1.5) or that every link
    meets unsaid (-0.1, nan) is refused in argparse's one usage line, as at_least refuses a count. Not a
    number: argparse's own "invalid float value" line, as for `type=float`."""
    value = float(text)
    if not 0 <= value <= 1:  # nan compares false: refused too
        raise argparse.ArgumentTypeError(f"must be a probability between 0 and 1, got {value}")
    return value


probability.__name__ = "float"  # argparse names the type by it in "invalid float value: 'x'"


def _add_model_options(p: argparse.ArgumentParser, *, cache: bool = True) -> None:
    p.add_argument("--cross-encoder", default=os.environ.get("MEDDEVKG_CROSS_ENCODER") or None,
                   help="cross-encoder name or local path (default $MEDDEVKG_CROSS_ENCODER, else none: the "
                        "feature is then missing)")
    p.add_argument("--cross-encoder-backend", choices=CROSS_ENCODER_BACKENDS,
                   default=os.environ.get("MEDDEVKG_CROSS_ENCODER_BACKEND") or None,
                   help="how the cross-encoder is loaded (default $MEDDEVKG_CROSS_ENCODER_BACKEND, else "
                        "sentence-transformers); flagembedding for BGE rerankers")
    p.add_argument("--device", choices=DEVICES, default=os.environ.get("MEDDEVKG_DEVICE") or "auto",
                   help="where the models run (default $MEDDEVKG_DEVICE, else auto: the GPU where there is one)")
    p.add_argument("--embedding-model", default=os.environ.get("MEDDEVKG_EMBEDDING_MODEL") or None,
                   help="packaged model name(s) or local path(s), comma-separated for an ensemble "
                        "(default $MEDDEVKG_EMBEDDING_MODEL, else all-MiniLM-L6-v2; the benchmark's best: "
                        "all-MiniLM-L6-v2,all-mpnet-base-v2; hashing = no model, for dry runs)")
    p.add_argument("--embedding-backend", choices=BACKENDS,
                   default=os.environ.get("MEDDEVKG_EMBEDDING_BACKEND") or None,
                   help="the CPU path of the encoder (default $MEDDEVKG_EMBEDDING_BACKEND, else torch-fp32)")
    if cache:
        p.add_argument("--embedding-cache", default=os.environ.get("MEDDEVKG_EMBEDDING_CACHE"),
                       help="directory of cached embeddings (default $MEDDEVKG_EMBEDDING_CACHE, else "
                            "$MEDDEVKG_HOME/embedding_cache)")


def _add_entity_extractor_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entity-extractor", choices=ENTITY_EXTRACTORS,
                   default=os.environ.get(ENTITY_EXTRACTOR_ENV) or "spacy",
                   help=f"Stage 1's entity extractor (default ${ENTITY_EXTRACTOR_ENV}, else spacy): spacy, offline, "
                        "or llm, the paper's prompts over the OpenAI-compatible API that MEDDEVKG_LLM_BASE_URL, "
                        "MEDDEVKG_LLM_MODEL and MEDDEVKG_LLM_API_KEY name")


def _add_app_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="DuckDB store (default $MEDDEVKG_DUCKDB or $MEDDEVKG_HOME/warehouse.duckdb)")
    p.add_argument("--links", help="a `meddevkg run`/`benchmark` output directory instead of the store")
    p.add_argument("--corpus", help="with --links: the corpus directory (default: the one named by the newer of "
                   "its report.json and summary.json, else $MEDDEVKG_CORPUS)")
    p.add_argument("--limit", type=at_least(1), default=20,
                   help="rows printed per table (default %(default)s; trajectory's table by year is printed whole)")
    p.add_argument("--min-probability", type=probability, default=0.0,
                   help="only links at least this probable (default %(default)s: every link; the link set also "
                        "keeps low-probability immune links)")


def _register_applications(sub) -> None:
    """recall-rootcause, ma-discovery, trajectory, views: the paper's applications on a finished run."""
    rc = sub.add_parser("recall-rootcause", help="patents behind a recalled device, and the devices sharing them")
    which = rc.add_mutually_exclusive_group(required=True)
    which.add_argument("--device", type=pma_number, help="PMA number of the device (e.g. P130021)")
    which.add_argument("--recall-number", help="openFDA device recall number (e.g. Z-0313-2007), fetched live")
    _add_app_source(rc)
    rc.set_defaults(func=recall_rootcause_command)
    ma = sub.add_parser("ma-discovery", help="a device's linked patents reached through an acquisition")
    ma.add_argument("--device", required=True, type=pma_number, help="PMA number of the device")
    _add_app_source(ma)
    ma.set_defaults(func=ma_discovery_command)
    tr = sub.add_parser("trajectory", help="a device's linked patents by filing and grant year (table, PNG)")
    tr.add_argument("--device", required=True, type=pma_number, help="PMA number of the device")
    tr.add_argument("--png", help="also draw the counts per year into this PNG")
    tr.add_argument("--fda-pma", help="fdadata_pma.parquet: approval dates for devices the corpus has none for")
    _add_app_source(tr)
    tr.set_defaults(func=trajectory_command)
    vw = sub.add_parser("views", help="create the app_* DuckDB views over the store's tables")
    vw.add_argument("--db", help="DuckDB store (default $MEDDEVKG_DUCKDB or $MEDDEVKG_HOME/warehouse.duckdb)")
    vw.set_defaults(func=views_command)


def _add_fda_pma_option(parser: argparse.ArgumentParser, feeds: str) -> None:
    parser.add_argument("--fda-pma", default=os.environ.get("MEDDEVKG_FDA_PMA") or None,
                        help=f"FDA PMA records (fdadata_pma.parquet; default $MEDDEVKG_FDA_PMA): the devices' "
                        f"supplements make their dossiers, for {feeds}")


def _add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="JSON file with a PipelineConfig (a report.json's `config` is one; "
                        "default $MEDDEVKG_PIPELINE_CONFIG, the JSON itself, else the documented defaults)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meddevkg", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="materialise every asset on the bundled demo corpus (or $MEDDEVKG_CORPUS) "
                                       "and print a summary")
    demo.set_defaults(func=demo_command)
    parts = sub.add_parser("partitions", help="list the instance's device and grant-year partitions, add some and "
                           "print the run that materialises them, or remove some with their stored rows")
    parts.add_argument("--add-years", help="grant years: 2019, 1976-2026 or undated, comma-separated")
    parts.add_argument("--add-devices", nargs="+", metavar="PMA", help="PMA numbers (P240003 ...)")
    parts.add_argument("--delete-years", help="grant years to remove (as --add-years), with their rows in the "
                       "store")
    parts.add_argument("--delete-devices", nargs="+", metavar="PMA",
                       help="PMA numbers to remove, with their rows in the store (also rows a partition deleted "
                            "in the UI left behind)")
    parts.set_defaults(func=partitions_command)
    run = sub.add_parser("run", help="run the pipeline on a corpus directory and write Parquet outputs")
    run.add_argument("--corpus", required=True, help="corpus directory (devices, patents, gold_links)")
    run.add_argument("--out", required=True, help="output directory")
    _add_fda_pma_option(run, "the dossier_lexical score; without it that score is missing")
    _add_config_option(run)
    _add_model_options(run)
    _add_entity_extractor_option(run)
    run.set_defaults(func=run_command)
    bench = sub.add_parser("benchmark", help="full pipeline, out-of-fold evaluation, baselines, ablations, report")
    bench.add_argument("--corpus", required=True, help="corpus directory with gold_links")
    bench.add_argument("--out", required=True, help="output directory")
    _add_config_option(bench)
    bench.add_argument("--no-ablations", action="store_true",
                       help="leave out the ablation reruns and the company-relations sensitivity rerun (most of "
                       "the run time): enough for compare-runs, which reads the main run's rankings only")
    _add_fda_pma_option(bench, "the dossier_lexical score; without it that score is missing")
    bench.add_argument("--fda-approval-dates", action="store_true",
                       help="date the corpus's devices by their FDA approval from --fda-pma, as openFDA's PMA "
                       "documents are on the live path: the company match's deal windows read them")
    _add_model_options(bench)
    _add_entity_extractor_option(bench)
    bench.set_defaults(func=benchmark_command)
    cmp = sub.add_parser("compare-runs", help="two sets of benchmark runs compared gold device by gold device, "
                         "with a Wilcoxon signed-rank test")
    cmp.add_argument("--corpus", required=True, help="the corpus the runs were benchmarked on (its gold_links)")
    cmp.add_argument("--a", nargs="+", required=True, help="benchmark output directories of side a (one per seed)")
    cmp.add_argument("--b", nargs="+", required=True, help="benchmark output directories of side b")
    cmp.add_argument("--out", help="also write the per-device frame to this Parquet file")
    cmp.add_argument("--allow-different-inputs", action="store_true",
                     help="compare runs whose report.json records other bytes of an input (a corpus table, the FDA "
                          "records) than another run's or --corpus's, with a warning: refused without it")
    cmp.set_defaults(func=compare_runs_command)
    pcv = sub.add_parser("pairs-cv",
                         help="device-grouped cross-validation of pair classifiers on a labelled pair file")
    pcv.add_argument("--pairs", required=True, help="file with fda_id, pat_id, device_text, patent_text, label")
    pcv.add_argument("--out", required=True, help="output directory")
    # a fold's devices are scored by a model trained on the other folds': one fold has no other
    pcv.add_argument("--folds", type=at_least(2), default=5,
                     help="cross-validation folds, each holding out whole device groups (devices sharing a device "
                          "text, a patent or a patent text) (default %(default)s)")
    pcv.add_argument("--seed", type=at_least(0), default=42,
                     help="seed of the fold split and of XGBoost; the repeated splits of the report take the seeds "
                          "after it (default %(default)s)")
    pcv.add_argument("--hashing", action="store_true",
                     help="model-free hashing encoder (fast dry run): --embedding-model hashing, whatever "
                          "$MEDDEVKG_EMBEDDING_MODEL says")
    _add_fda_pma_option(pcv, "the dossier TF-IDF features")
    _add_model_options(pcv, cache=False)  # each run encodes its pairs' texts once: nothing to reuse
    pcv.set_defaults(func=pairs_cv_command)
    bex = sub.add_parser("bench-extract", help="entity extraction: throughput, coverage, discrimination, LLM recall")
    bex.add_argument("--corpus", required=True, help="corpus directory (devices, patents, gold_links)")
    bex.add_argument("--llm-entities", help="LLM entities per gold pair (default: gold_pair_llm_entities.parquet "
                     "in the corpus directory, if present)")
    bex.add_argument("--runs", type=at_least(1), default=3,
                     help="timed runs per n_process value (median reported; default %(default)s); the LLM is timed "
                     "in one run, since a second would read the replies of the first")
    bex.add_argument("--n-process", type=at_least(1), nargs="+", default=[1, 2],
                     help="spaCy process counts to time (not applicable to the LLM; default %(default)s)")
    bex.add_argument("--random-pairs", type=at_least(1), default=20,
                     help="random non-gold pairs per gold device (default %(default)s)")
    bex.add_argument("--seed", type=at_least(0), default=42,
                     help="seed of the random non-gold pairs drawn per gold device (default %(default)s)")
    _add_entity_extractor_option(bex)
    bex.set_defaults(func=bench_extract_command)
    crep = sub.add_parser("company-report", help="company resolution: FDA sponsor agreement, cross-company gold, "
                          "extra same-company pairs")
    crep.add_argument("--corpus", required=True, help="corpus directory (devices, patents, gold_links)")
    crep.add_argument("--fda-pma", required=True,
                      help="fdadata_pma.parquet (raw FDA sponsor names and decision dates)")
    crep.add_argument("--out", help="also write the full report (with its lists) as a JSON file")
    crep.set_defaults(func=company_report_command)
    bsc = sub.add_parser("bench-scale", help="Stage 2 + 3 over a synthetic corpus of the paper's size (no encoder)")
    bsc.add_argument("--patents", type=at_least(1), default=698_191,
                     help="patents in the synthetic corpus (default %(default)s: the paper's count)")
    # Stage 3's fold models train on the gold of 2 devices at least (fold_models.MIN_GOLD_DEVICES; importing it
    # would load XGBoost to start every command)
    bsc.add_argument("--devices", type=at_least(2), default=434,
                     help="devices in the synthetic corpus (default %(default)s: the paper's count)")
    bsc.add_argument("--runs", type=at_least(1), default=1,
                     help="timed runs of each stage (medians reported; default %(default)s)")
    bsc.add_argument("--seed", type=at_least(0), default=0,
                     help="seed of the synthetic corpus and its gold links (default %(default)s)")
    bsc.set_defaults(func=bench_scale_command)
    bem = sub.add_parser("bench-embed", help="texts/s of the CPU embedding paths (torch fp32 and int8, ONNX fp32 "
                         "and int8), and their agreement with fp32")
    bem.add_argument("--corpus", required=True, help="corpus directory whose patent texts to encode")
    bem.add_argument("--texts", type=at_least(1), default=500,
                     help="patent texts encoded, a sample of the corpus's when it has more (default %(default)s)")
    bem.add_argument("--runs", type=at_least(1), default=3,
                     help="timed passes of every path, interleaved (median reported; default %(default)s)")
    bem.add_argument("--batch-size", type=at_least(1), default=32,
                     help="texts per forward pass, the same for every path (default %(default)s)")
    bem.set_defaults(func=bench_embed_command)
    bbf = sub.add_parser("bench-backfill", help="a backfill of every device partition through Dagster vs the same "
                         "work through the core (ratio of medians)")
    bbf.add_argument("--corpus", required=True, help="corpus directory")
    bbf.add_argument("--runs", type=at_least(1), default=3,
                     help="timed runs of the Dagster backfill and of the core (median of each; default %(default)s)")
    bbf.add_argument("--home", help="MEDDEVKG_HOME for the run, kept afterwards "
                     "(default: a temporary directory, removed at the end)")
    bbf.add_argument("--patent-copies", type=at_least(1), default=1,
                     help="link the devices against this many copies of the stored patents (ids suffixed ~i), to see "
                     "the ratio at a larger patent corpus (default %(default)s: the patents as stored)")
    bbf.set_defaults(func=bench_backfill_command)
    sel = sub.add_parser("select-devices", help="the paper's cardiovascular device selection on FDA PMA records, "
                         "compared with a benchmark's devices")
    sel.add_argument("--fda-pma", required=True, help="fdadata_pma.parquet (every PMA decision)")
    sel.add_argument("--product-codes", required=True, help="fdadata_product_codes.parquet (FDA classification)")
    sel.add_argument("--benchmark", required=True, help="corpus directory whose devices to compare with")
    sel.add_argument("--out", help="also write the selected devices as a devices table (Parquet)")
    sel.set_defaults(func=select_devices_command)
    _register_applications(sub)
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # inside the try: a closed pipe shows at the flush when the output fits the buffer
        return code
    except BrokenPipeError:  # `meddevkg trajectory ... | head`: the reader left; stop as Unix tools do (SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python exits
        return 128 + signal.SIGPIPE
    except InputError as exc:  # an unusable input, named by the message: no traceback for it
        # its first line: a wrapped library message may go on with advice on the library's own API
        print(str(exc).strip().partition("\n")[0], file=sys.stderr)
        return 1
    except _UNREADABLE_PATH as exc:  # a path that cannot be read, as the system names it
        if not exc.filename:
            raise  # not a file the user gave: a network or library fault keeps its traceback
        print(f"{exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1


_UNREADABLE_PATH = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
"""The OSErrors that mean a path given to the command cannot be read; other OSErrors (a full disk,
a refused connection, a model library's load error) are faults to see whole."""
