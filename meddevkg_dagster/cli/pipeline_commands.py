"""The commands on a corpus directory, outside Dagster: `run`, `benchmark` and `compare-runs`, `pairs-cv`, the
`bench-*` measurements, `company-report` and `select-devices`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from meddevkg_core.atomic_files import claimed_directory, finish_interrupted_commit, replaced_file
from meddevkg_core.errors import InputError
from meddevkg_dagster.cli.pipeline_setup import (
    checked_model_choices,
    exit_on_llm_failure,
    exit_on_missing_model,
    exit_on_untrainable_gold,
    extractor_settings,
    models_from_options,
    pipeline_config,
    require_trainable_gold,
)


def run_command(args: argparse.Namespace) -> int:
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.dossier import with_supplements
    from meddevkg_core.pipeline import run_pipeline, write_result
    from meddevkg_core.report import entities_line, percent

    checked_model_choices(args)
    extraction = extractor_settings(args)  # an LLM without its endpoint is refused before the corpus is read
    config, config_file = pipeline_config(args)  # a bad --config is refused before the corpus is read
    corpus = with_supplements(read_corpus(args.corpus), args.fda_pma)
    print(f"corpus {args.corpus}: {corpus.devices.height} devices, {corpus.patents.height} patents, "
          f"{corpus.gold_links.height} gold pairs, {corpus.rejected.height} rejected rows")
    require_trainable_gold(corpus, args.corpus)
    with claimed_directory(args.out):  # checked before the pipeline, and no other run writes there till the end
        models = models_from_options(args, config, extraction)
        with exit_on_untrainable_gold(args.corpus), exit_on_llm_failure(models):
            result = run_pipeline(corpus, models, config, config_file=config_file)
        out = write_result(result, args.out, corpus.root)
    if extraction.llm is not None:  # spaCy's run prints what it always did
        print(f"entity extraction: {entities_line(result.entity_extraction)}")
    ev = result.evaluation
    print(f"\nwrote {out}: {ev.pool_size} candidates ({percent(ev.pool_share_of_pairs)} of pairs, "
          f"gold recall {percent(ev.pool_recall)}), {ev.n_links} links ({percent(ev.link_share_of_pairs)} of pairs, "
          f"out-of-fold gold recall {percent(ev.link_recall)})")
    for note in result.notes:
        print(f"note: {note}")
    return 0


def benchmark_command(args: argparse.Namespace) -> int:

    from meddevkg_core.benchmark import run_benchmark
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.dossier import with_supplements

    if args.fda_approval_dates and not args.fda_pma:  # a usage error, before any file is read
        raise SystemExit("--fda-approval-dates reads the approvals from --fda-pma: give both")
    checked_model_choices(args)
    extraction = extractor_settings(args)  # an LLM without its endpoint is refused before any file is read
    # a bad --config is refused before the corpus and FDA records are read
    config, config_file = pipeline_config(args)
    # one read of the FDA records: the supplements, and with --fda-approval-dates the approvals too
    corpus = with_supplements(read_corpus(args.corpus), args.fda_pma, approval_dates=args.fda_approval_dates)
    require_trainable_gold(corpus, args.corpus)
    with claimed_directory(args.out):  # checked before the models are loaded, held till the outputs are written
        models = models_from_options(args, config, extraction)
        with exit_on_untrainable_gold(args.corpus), exit_on_llm_failure(models):
            result = run_benchmark(corpus, models, config, args.out, ablations=not args.no_ablations,
                                   config_file=config_file)
    print((Path(args.out) / "report.md").read_text())
    print(f"wrote {args.out}: candidates.parquet, links.parquet, rankings.parquet, rejected_records.parquet, "
          "report.json, report.md, plots/")
    return 0 if result.report else 1


def compare_runs_command(args: argparse.Namespace) -> int:
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.raw_files import read_parquet, reading
    from meddevkg_core.run_comparison import (
        RankingsError,
        check_inputs,
        compare_runs,
        format_comparison,
        input_check_lines,
        recorded_inputs,
    )

    corpus = read_corpus(args.corpus)
    if not corpus.has_gold:
        raise SystemExit(f"{args.corpus} has no gold_links: a comparison needs gold to evaluate against")
    for out in (*args.a, *args.b):
        finish_interrupted_commit(out)  # a benchmark killed while moving its outputs in: its rankings and report
    inputs = check_inputs({d: recorded_inputs(d) for d in args.a}, {d: recorded_inputs(d) for d in args.b},
                          corpus.inputs)
    lines = input_check_lines(inputs)
    if inputs.differing and not args.allow_different_inputs:
        raise SystemExit(f"cannot compare: {lines[0]}; a device-by-device comparison of runs on different data is "
                         "not one of variants (--allow-different-inputs compares them anyway)")

    def rankings(out: str) -> pl.DataFrame:
        path = Path(out) / "rankings.parquet"
        if not path.is_file():
            raise SystemExit(f"{path} not found: pass directories written by `meddevkg benchmark`")
        with reading(path, error=InputError):
            return read_parquet(path)

    try:
        comparison, paired = compare_runs([rankings(d) for d in args.a], [rankings(d) for d in args.b],
                                          corpus.gold_links)
    except RankingsError as err:
        raise SystemExit(f"cannot compare: {err}") from err
    comparison = comparison.model_copy(update={"inputs": inputs})
    if inputs.differing:  # compared all the same (--allow-different-inputs): said first
        lines[0] = f"WARNING: {lines[0]}"
    print("\n".join([*lines, format_comparison(comparison, paired)]))
    print(comparison.model_dump_json())
    if args.out:
        with replaced_file(args.out) as tmp:
            paired.write_parquet(tmp)
        print(f"wrote {args.out}: one row per gold device")
    return 0


def pairs_cv_command(args: argparse.Namespace) -> int:
    from meddevkg_core.pair_cv import headline, main_pairs_cv

    checked_model_choices(args)
    # checked before the cross-validation, held till its outputs are written
    with claimed_directory(args.out), exit_on_missing_model():
        report = main_pairs_cv(args.pairs, args.out, args.cross_encoder, args.device, args.hashing,
                               folds=args.folds, seed=args.seed, fda_pma=args.fda_pma,
                               cross_encoder_backend=args.cross_encoder_backend or "sentence-transformers",
                               embedding_model=args.embedding_model, embedding_backend=args.embedding_backend)
    print(json.dumps(report, indent=2, default=str))
    print(f"wrote {args.out}: pair_scores.parquet, report.json")
    print(json.dumps(headline(report)))
    return 0


def bench_extract_command(args: argparse.Namespace) -> int:
    from meddevkg_core.config import CandidateConfig
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.extraction_benchmark import format_summary, measure_extraction, read_llm_entities
    from meddevkg_core.lineage import read_fingerprinted
    from meddevkg_core.ontology import load_meddevonto

    checked_model_choices(args)
    extraction = extractor_settings(args)  # an LLM without its endpoint is refused before the corpus is read
    corpus = read_corpus(args.corpus)
    llm_path = Path(args.llm_entities or Path(args.corpus) / "gold_pair_llm_entities.parquet")
    if args.llm_entities and not llm_path.is_file():
        raise SystemExit(f"{llm_path}: no such file")
    llm, llm_file = read_fingerprinted(llm_path, read_llm_entities) if llm_path.is_file() else (None, None)
    extractors = extraction.extractors()
    with exit_on_llm_failure(None, extractors.values()):
        result = measure_extraction(corpus, load_meddevonto(), extractors, CandidateConfig(), llm,
                                    seed=args.seed, random_pairs_per_device=args.random_pairs,
                                    n_process=args.n_process, timing_runs=args.runs,
                                    progress=lambda line: print(line, file=sys.stderr), llm_entities_file=llm_file)
    print(format_summary(result))
    print(json.dumps(result))
    return 0


def company_report_command(args: argparse.Namespace) -> int:
    from meddevkg_core.company_report import format_company_report, main_company_report
    from meddevkg_dagster.resources import former_owners_setting

    report = main_company_report(args.corpus, args.fda_pma, args.out,
                                 former_owners=former_owners_setting())
    print(format_company_report(report))
    if args.out:
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def bench_scale_command(args: argparse.Namespace) -> int:
    from meddevkg_core.scale_bench import format_scale_report, main_bench_scale

    with exit_on_untrainable_gold("--patents / --devices"):  # Stage 2's pool decides which sizes are too small
        report = main_bench_scale(args.patents, args.devices, args.seed, args.runs,
                                  progress=lambda line: print(line, file=sys.stderr))
    print(format_scale_report(report))
    print(json.dumps(report, sort_keys=True))
    return 0


def bench_embed_command(args: argparse.Namespace) -> int:
    from meddevkg_core.embed_bench import format_embed_report, main_bench_embed

    report = main_bench_embed(args.corpus, args.texts, args.runs, progress=lambda line: print(line, file=sys.stderr),
                              batch_size=args.batch_size)
    print(format_embed_report(report))
    print(json.dumps(report, sort_keys=True))
    return 0


@contextmanager
def backfill_home(home: str | None) -> Iterator[Path]:
    """MEDDEVKG_HOME for a benchmark: the given one, kept; or a temporary one, removed afterwards.

    A benchmark home holds a whole warehouse and Dagster instance (hundreds of MB), so one that
    nobody asked to keep must not outlive the command, whether it ends well or not.
    """
    if home:
        yield Path(home)
        return
    with tempfile.TemporaryDirectory(prefix="meddevkg-backfill-") as tmp:
        yield Path(tmp)


def bench_backfill_command(args: argparse.Namespace) -> int:
    with backfill_home(args.home) as home:
        os.environ["MEDDEVKG_HOME"] = str(home)
        os.environ.pop("DAGSTER_HOME", None)  # an instance of its own under that home
        from meddevkg_dagster.backfill_bench import run_backfill_bench

        report = run_backfill_bench(Path(args.corpus).resolve(), args.runs, args.patent_copies)
    report["home_removed"] = not args.home  # the path in the report is then gone
    print(f"\nbackfill of {report['devices']} device partitions x {report['patents']} patents "
          f"({report['links']} pool rows), median of {report['runs']}: Dagster (one run) "
          f"{report['dagster_median_s']} s, core directly {report['core_median_s']} s, ratio {report['ratio']}; "
          f"CPU {report['dagster_cpu_median_s']} s vs {report['core_cpu_median_s']} s, ratio {report['cpu_ratio']}")
    print(json.dumps(report, sort_keys=True))
    return 0


def select_devices_command(args: argparse.Namespace) -> int:
    from meddevkg_core.sources.device_selection import format_selection_report, main_select_devices

    report = main_select_devices(args.fda_pma, args.product_codes, args.benchmark, args.out)
    print(format_selection_report(report))
    return 0
