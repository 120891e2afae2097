"""`meddevkg`: run the pipeline from a terminal.

`demo` materialises the Dagster assets on the bundled corpus (the same job the UI runs);
`run` executes the same core stages on any corpus directory and writes Parquet files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from meddevkg_core.atomic_files import claimed_directory, finish_interrupted_commit, replaced_file
from meddevkg_core.embeddings import BACKENDS, DEVICES
from meddevkg_core.errors import InputError
from meddevkg_core.home import home_dir

if TYPE_CHECKING:
    from dagster import DagsterEvent

    from meddevkg_core.app_store import AppTables
    from meddevkg_core.config import CrossEncoderConfig, PipelineConfig
    from meddevkg_core.corpus import Corpus
    from meddevkg_core.llm_extraction import EntityExtractor, ExtractorSettings
    from meddevkg_core.pipeline import Models


def _prepare_instance_home() -> Path:
    """DAGSTER_HOME for CLI runs, seeded with the project's dagster.yaml so the UI sees the runs."""
    dagster_home = Path(os.environ.get("DAGSTER_HOME", home_dir() / "dagster_home")).resolve()
    dagster_home.mkdir(parents=True, exist_ok=True)
    project_yaml = Path(__file__).resolve().parents[1] / "dagster.yaml"
    if project_yaml.is_file() and not (dagster_home / "dagster.yaml").exists():
        shutil.copy(project_yaml, dagster_home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    return dagster_home


def run_failure(events: Sequence[DagsterEvent]) -> str:
    """Where and why a run failed, in one line: the first failed step (or its resources) and the error's own
    message, without the exception's class or pydantic's frame, as the command's last line (the run's
    exception escaping the command ended it in a traceback)."""
    import dagster as dg

    kinds = (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RESOURCE_INIT_FAILURE)
    failed = next((e for e in events if e.event_type in kinds), None)
    error = getattr(failed.event_specific_data, "error", None) if failed else None
    if failed is None or error is None:
        return "a point the run's events do not name"
    text = error.message.strip()
    if "Value error, " in text:  # a pydantic validation error: the validator's own message
        reason = text.split("Value error, ", 1)[1].split(" [type=", 1)[0]
    else:
        reason = re.sub(r"^[\w.]+: ", "", text.splitlines()[0])
    return f"{'step ' + failed.step_key if failed.step_key else 'its resources'}: {reason}"


def ensure_store_schema(db: Path) -> None:
    """Rebuild a DuckDB store written under other table schemas (older code) before a full run.

    The IO manager replaces partitions with DELETE + INSERT, and refuses a partitioned table whose
    columns changed; a full-graph run rewrites every table, so dropping them first loses nothing.
    """
    import duckdb

    from meddevkg_core.schemas import fingerprint

    db.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(db)) as con:
        con.execute("create schema if not exists meddevkg_meta")
        con.execute("create table if not exists meddevkg_meta.store (schema_fingerprint varchar)")
        stamp = con.execute("select schema_fingerprint from meddevkg_meta.store").fetchone()
        [(tables,)] = con.execute(
            "select count(*) from information_schema.tables where table_schema = 'meddevkg'").fetchall()
        if stamp and stamp[0] == fingerprint():
            return
        if tables:
            print(f"{db} was written by another version of the table schemas: rebuilding its tables")
            con.execute("drop schema if exists meddevkg cascade")
        con.execute("delete from meddevkg_meta.store")
        con.execute("insert into meddevkg_meta.store values (?)", [fingerprint()])


def materialize_corpus(corpus_dir: Path | None = None) -> dict[str, str]:
    """Register the corpus's patent years and devices as partitions, then run `patents_job` over every
    year and `meddevkg_job` over every device (each one run)."""
    import dagster as dg

    if corpus_dir is not None:
        os.environ["MEDDEVKG_CORPUS"] = str(Path(corpus_dir).resolve())
    _prepare_instance_home()
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.patent_years import year_keys
    from meddevkg_dagster.definitions import defs
    from meddevkg_dagster.partitions import PATENT_YEARS, PMA_DEVICES, range_tags
    from meddevkg_dagster.resources import setting_value

    resources = defs.resources
    assert resources is not None  # build_definitions always gives the resources
    corpus_path = setting_value(resources["corpus"].path)
    wanted = os.environ.get("MEDDEVKG_CORPUS")
    if wanted and Path(wanted).resolve() != Path(corpus_path).resolve():  # never run another corpus silently
        raise RuntimeError(f"this process's Dagster definitions were built for the corpus {corpus_path}, not "
                           f"MEDDEVKG_CORPUS={wanted}: materialise it in a new process")
    corpus = read_corpus(corpus_path)
    _require_trainable_gold(corpus, corpus_path)
    devices = corpus.devices["fda_id"].sort().to_list()
    instance = dg.DagsterInstance.get()
    years = register_partitions(instance, PATENT_YEARS, year_keys(corpus.patents))
    keys = register_partitions(instance, PMA_DEVICES, devices)
    if not set(keys) <= set(devices):
        raise SystemExit(f"the instance has device partitions the corpus lacks ({len(set(keys) - set(devices))}); "
                         "use a separate MEDDEVKG_HOME per corpus")
    ensure_store_schema(Path(setting_value(resources["io_manager"].database)))
    run_ids = []
    for job, part in (("patents_job", years), ("meddevkg_job", keys)):
        result = defs.resolve_job_def(job).execute_in_process(
            instance=instance, run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
            tags=range_tags(part[0], part[-1]), raise_on_error=False)
        if not result.success:
            raise SystemExit(f"the {job} run failed at {run_failure(result.all_events)} "
                             "(the log above has the details)")
        run_ids.append(result.run_id)
    return {"run_id": run_ids[-1], "patents_run_id": run_ids[0]}


def register_partitions(instance, name: str, wanted: list[str]) -> list[str]:
    """Add the missing keys to a dynamic partitions definition; all its keys, in the instance's order."""
    known = set(instance.get_dynamic_partitions(name))
    if new := [k for k in wanted if k not in known]:
        instance.add_dynamic_partitions(name, new)
    keys = instance.get_dynamic_partitions(name)
    print(f"{name}: registered {len(new)} new partition(s); {len(keys)} in total")
    return keys


def _demo(_: argparse.Namespace) -> int:
    import duckdb

    run = materialize_corpus()
    db = str(_default_db())
    with duckdb.connect(db, read_only=True) as con:
        ev = con.sql("select * from meddevkg.link_evaluation").pl().row(0, named=True)
        top = con.sql("""select l.fda_id, l.pat_id, round(l.probability, 3) as p, l.evidence
                         from meddevkg.reranked_links l where l.decision order by l.probability desc limit 5""").pl()
    print("\nMedDevKG demo")
    rows = [("devices", ev["n_devices"]), ("patents", ev["n_patents"]),
            ("candidates (Stage 2)", ev["pool_size"]), ("links (Stage 3)", ev["n_links"]),
            ("gold pairs / devices", f"{ev['n_gold_pairs']} / {ev['n_gold_devices']}"),
            ("pool recall on gold", _pct(ev["pool_recall"])),
            ("link recall on gold (out-of-fold)", _pct(ev["link_recall"])),
            ("share of all pairs kept", _pct(ev["link_share_of_pairs"])),
            ("DuckDB file", db), ("Dagster run", run["run_id"]),
            ("open the UI", ui_hint(os.environ))]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print("\nstrongest links:")
    with pl.Config(tbl_rows=5, fmt_str_lengths=90, tbl_width_chars=160):
        print(top)
    return 0


_WORKSPACE = Path(__file__).resolve().parents[1] / "workspace.yaml"
_PATH_SETTINGS = ("MEDDEVKG_CORPUS", "MEDDEVKG_DUCKDB", "MEDDEVKG_EMBEDDING_CACHE", "MEDDEVKG_FDA_PMA",
                  "MEDDEVKG_PATENTSVIEW_BULK_DIR")
_MODEL_SETTINGS = ("MEDDEVKG_EMBEDDING_MODEL", "MEDDEVKG_CROSS_ENCODER")  # names, or paths, comma-separated
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def _absolute(name: str, value: str) -> str:
    if name in _PATH_SETTINGS and value:
        return str(Path(value).resolve())
    if name in _MODEL_SETTINGS:
        return ",".join(str(Path(v).resolve()) if v and Path(v).exists() else v for v in value.split(","))
    return value


def ui_hint(environ: Mapping[str, str]) -> str:
    """Where to see this run: `dagster dev` over a local (SQLite) instance; a deployed instance
    (Postgres, docker/) has its webserver already, and a `dagster dev` on it would start a second daemon."""
    import dagster as dg
    from dagster._core.storage.runs import InMemoryRunStorage, SqliteRunStorage

    with dg.DagsterInstance.get() as instance:
        local = isinstance(instance.run_storage, SqliteRunStorage | InMemoryRunStorage)
    return ui_command(environ) if local else "the deployment's webserver, which shows this run now"


def ui_command(environ: Mapping[str, str]) -> str:
    """`dagster dev` on what this run wrote, from any directory (see `dagster_command`)."""
    # An installed package (not a checkout) has no workspace.yaml beside it: name the module instead.
    target = ["-w", str(_WORKSPACE)] if _WORKSPACE.is_file() else ["-m", "meddevkg_dagster.definitions"]
    return dagster_command(environ, ["dev", *target])


def dagster_command(environ: Mapping[str, str], args: list[str]) -> str:
    """A `dagster` command line with this process's settings: the code location reads its corpus,
    store and models from the MEDDEVKG_* settings and the instance from DAGSTER_HOME, so the command
    carries them (paths made absolute) and works from any directory. A secret's value is never
    printed; its name is, so the user exports it in that shell too."""
    settings = {"MEDDEVKG_HOME": str(home_dir(environ))}
    secrets = []
    for name, value in sorted(environ.items()):
        if not name.startswith("MEDDEVKG_") or name == "MEDDEVKG_HOME":
            continue
        if any(word in name for word in _SECRET_WORDS):
            secrets.append(name)
        else:
            settings[name] = _absolute(name, value)
    settings["DAGSTER_HOME"] = environ["DAGSTER_HOME"]
    dagster = Path(sys.executable).parent / "dagster"
    line = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in settings.items()),
                     shlex.quote(str(dagster if dagster.is_file() else "dagster")), *map(shlex.quote, args)])
    return line + (f"  (with {', '.join(secrets)} exported)" if secrets else "")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _models(args: argparse.Namespace, config: PipelineConfig, extraction: ExtractorSettings):
    """The models `run` and `benchmark` load from their options (whose defaults are the MEDDEVKG_* settings)."""
    return load_models(Path(args.corpus), config.cross_encoder, args.device,
                       Path(args.embedding_cache) if args.embedding_cache else home_dir() / "embedding_cache",
                       args.embedding_model, args.embedding_backend, extraction)


def load_models(corpus_dir: Path, cross_encoder: CrossEncoderConfig, device: str, cache_dir: Path | None,
                embedding_model: str | None = None, embedding_backend: str | None = None,
                extraction: ExtractorSettings | None = None) -> Models:
    """`extraction` (default spaCy) chooses Stage 1's extractor, as the entity_extractor resource does."""
    from meddevkg_core.companies import CompanyResolver
    from meddevkg_core.cross_encoder import load_cross_encoder
    from meddevkg_core.embeddings import EmbeddingCache, load_embedding_model
    from meddevkg_core.llm_extraction import ExtractorSettings
    from meddevkg_core.packaged_models import default_models_dir
    from meddevkg_core.pipeline import Models
    from meddevkg_core.terminologies import TerminologyConfig, load_ontology
    from meddevkg_dagster.resources import former_owners_setting, terminologies_strict_setting

    try:  # MEDDEVKG_UMLS_* / MEDDEVKG_MESH_XML / MEDDEVKG_TERMINOLOGIES_STRICT, as the meddevonto asset reads them
        config = TerminologyConfig.from_env(strict=terminologies_strict_setting()).require_paths()
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(str(exc)) from exc
    ontology = load_ontology(config)
    if ontology.rejected.height:
        print(f"ontology: {ontology.rejected.height} UMLS/MeSH record(s) quarantined (in rejected_records)")
    with _models_named_by_their_options():
        encoder = load_embedding_model(embedding_model, default_models_dir(), device=device, backend=embedding_backend)
    resolver = CompanyResolver.for_corpus(corpus_dir, former_owners=former_owners_setting())
    if resolver.rejected.height:
        print(f"companies: {resolver.rejected.height} row(s) of the corpus's company tables quarantined "
              "(in rejected_records)")
    with _models_named_by_their_options():
        scorer = load_cross_encoder(cross_encoder, device=device)
    return Models(
        encoder=encoder, entity_extractors=(extraction or ExtractorSettings()).extractors(),
        ontology=ontology.ontology, ontology_rejected=ontology.rejected, resolver=resolver,
        cross_encoder=scorer, embedding_cache=EmbeddingCache(cache_dir) if cache_dir else None)


@contextmanager
def _models_named_by_their_options() -> Iterator[None]:
    """A model an option names that is not on this machine ends the command in one line naming the option
    and its variable, as a mistyped corpus path does (the cross-encoder's ended in a traceback)."""
    from meddevkg_core.cross_encoder import ModelUnavailableOfflineError
    from meddevkg_core.errors import ModelNotFoundError

    try:
        yield
    except ModelUnavailableOfflineError as exc:
        raise SystemExit(f"--cross-encoder / MEDDEVKG_CROSS_ENCODER: {exc}") from exc
    except ModelNotFoundError as exc:
        raise SystemExit(f"--embedding-model / MEDDEVKG_EMBEDDING_MODEL: {exc}") from exc


def _require_trainable_gold(corpus: Corpus, path: str) -> None:
    """Stop before any encoding when the gold cannot train Stage 3 (it would fail at the very end)."""
    from meddevkg_core.rerank import MIN_GOLD_DEVICES

    n = corpus.gold_links["fda_id"].n_unique() if corpus.has_gold else 0
    if n < MIN_GOLD_DEVICES:
        raise SystemExit(f"{path}: {'no gold_links' if n == 0 else f'gold links for only {n} device'}; Stage 3 "
                         "learns from gold links, scoring each gold device with a model that never saw it, and "
                         f"needs them for at least {MIN_GOLD_DEVICES} devices (README, 'Another corpus')"
                         + _rejected_note(corpus.rejected))


def _rejected_note(rejected: pl.DataFrame, shown: int = 6) -> str:
    """The rejected rows by table and reason: gold lost to rejected devices must not read as a corpus without gold."""
    if not rejected.height:
        return ""
    counts = rejected.group_by("source", "reason").len().sort(
        ["len", "source", "reason"], descending=[True, False, False])
    parts = [f"{n} in {source}: {reason}" for source, reason, n in counts.head(shown).iter_rows()]
    more = f"; {counts.height - shown} other reason(s)" if counts.height > shown else ""
    return f". The corpus reader rejected {rejected.height} row(s): {'; '.join(parts)}{more}"


@contextmanager
def _exit_on_untrainable_gold(path: str) -> Iterator[None]:
    """A training error found after the early check (gold devices the Stage-2 pool does not hold)
    ends the command with its reason, as the early check does."""
    from meddevkg_core.rerank import RerankerTrainingError

    try:
        yield
    except RerankerTrainingError as exc:
        raise SystemExit(f"{path}: {exc}") from exc


def _extractor_settings(args: argparse.Namespace) -> ExtractorSettings:
    """Stage 1's extractor: --entity-extractor (default $MEDDEVKG_ENTITY_EXTRACTOR) and, for `llm`, the
    MEDDEVKG_LLM_* variables, read as the entity_extractor resource reads them; a missing or malformed one is an
    InputError naming its variable."""
    from meddevkg_core.llm_extraction import ExtractorSettings

    settings = ExtractorSettings.read(args.entity_extractor, os.environ)
    if settings.llm is not None:  # the key is never printed, nor the URL (it may hold a token)
        print(f"entity extraction: LLM {settings.llm.model!r}, replies cached in {settings.llm.cache_dir}")
    return settings


@contextmanager
def _exit_on_llm_failure(models: Models | None, extractors: Iterable[EntityExtractor] = ()) -> Iterator[None]:
    """An LLM endpoint that refuses the key or answers none of the documents ends the command in one line,
    before any output is written (the Dagster step fails with the same line); the extractors' HTTP clients
    (`models`', else those given) are closed however the run ends."""
    from meddevkg_core.llm_client import LLMAuthError
    from meddevkg_core.llm_extraction import LLMUnavailableError

    try:
        yield
    except (LLMAuthError, LLMUnavailableError) as exc:
        raise SystemExit(f"{type(exc).__name__}: {exc}") from None
    finally:
        for extractor in (models.entity_extractors.values() if models is not None else extractors):
            extractor.close()


def pipeline_config(args: argparse.Namespace) -> PipelineConfig:
    """The method's settings: `--config FILE`, else $MEDDEVKG_PIPELINE_CONFIG (JSON, as Dagster reads
    it), else the defaults; the cross-encoder options, when given, choose its model and backend."""
    from meddevkg_core.config import parse_pipeline_config

    source, text = "MEDDEVKG_PIPELINE_CONFIG", os.environ.get("MEDDEVKG_PIPELINE_CONFIG", "")
    try:
        if args.config:
            source, text = args.config, Path(args.config).read_text(encoding="utf-8")
        config = parse_pipeline_config(text, source)
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"--config {args.config}: cannot be read ({exc})") from exc
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    chosen = {"model": args.cross_encoder, "backend": args.cross_encoder_backend}
    if chosen := {k: v for k, v in chosen.items() if v}:
        config = config.model_copy(update={"cross_encoder": config.cross_encoder.model_copy(update=chosen)})
    return config


def _run(args: argparse.Namespace) -> int:
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.dossier import with_supplements
    from meddevkg_core.pipeline import run_pipeline, write_result
    from meddevkg_core.report import entities_line

    _checked_model_choices(args)
    extraction = _extractor_settings(args)  # an LLM without its endpoint is refused before the corpus is read
    config = pipeline_config(args)  # a bad --config is refused before the corpus is read
    corpus = with_supplements(read_corpus(args.corpus), args.fda_pma)
    print(f"corpus {args.corpus}: {corpus.devices.height} devices, {corpus.patents.height} patents, "
          f"{corpus.gold_links.height} gold pairs, {corpus.rejected.height} rejected rows")
    _require_trainable_gold(corpus, args.corpus)
    with claimed_directory(args.out):  # checked before the pipeline, and no other run writes there till the end
        models = _models(args, config, extraction)
        with _exit_on_untrainable_gold(args.corpus), _exit_on_llm_failure(models):
            result = run_pipeline(corpus, models, config)
        out = write_result(result, args.out, corpus.root)
    if extraction.llm is not None:  # spaCy's run prints what it always did
        print(f"entity extraction: {entities_line(result.entity_extraction)}")
    ev = result.evaluation
    print(f"\nwrote {out}: {ev.pool_size} candidates ({_pct(ev.pool_share_of_pairs)} of pairs, "
          f"gold recall {_pct(ev.pool_recall)}), {ev.n_links} links ({_pct(ev.link_share_of_pairs)} of pairs, "
          f"out-of-fold gold recall {_pct(ev.link_recall)})")
    for note in result.notes:
        print(f"note: {note}")
    return 0


def _benchmark(args: argparse.Namespace) -> int:

    from meddevkg_core.benchmark import run_benchmark
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.dossier import with_supplements

    if args.fda_approval_dates and not args.fda_pma:  # a usage error, before any file is read
        raise SystemExit("--fda-approval-dates reads the approvals from --fda-pma: give both")
    _checked_model_choices(args)
    extraction = _extractor_settings(args)  # an LLM without its endpoint is refused before any file is read
    config = pipeline_config(args)  # a bad --config is refused before the corpus and FDA records are read
    # one read of the FDA records: the supplements, and with --fda-approval-dates the approvals too
    corpus = with_supplements(read_corpus(args.corpus), args.fda_pma, approval_dates=args.fda_approval_dates)
    _require_trainable_gold(corpus, args.corpus)
    with claimed_directory(args.out):  # checked before the models are loaded, held till the outputs are written
        models = _models(args, config, extraction)
        with _exit_on_untrainable_gold(args.corpus), _exit_on_llm_failure(models):
            result = run_benchmark(corpus, models, config, args.out, ablations=not args.no_ablations)
    print((Path(args.out) / "report.md").read_text())
    print(f"wrote {args.out}: candidates.parquet, links.parquet, rankings.parquet, rejected_records.parquet, "
          "report.json, report.md, plots/")
    return 0 if result.report else 1


def _compare_runs(args: argparse.Namespace) -> int:
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.raw_files import read_parquet, reading
    from meddevkg_core.run_comparison import RankingsError, compare_runs, format_comparison

    corpus = read_corpus(args.corpus)
    if not corpus.has_gold:
        raise SystemExit(f"{args.corpus} has no gold_links: a comparison needs gold to evaluate against")

    def rankings(out: str) -> pl.DataFrame:
        finish_interrupted_commit(out)  # a benchmark killed while moving its outputs in: its rankings
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
    print(format_comparison(comparison, paired))
    print(comparison.model_dump_json())
    if args.out:
        with replaced_file(args.out) as tmp:
            paired.write_parquet(tmp)
        print(f"wrote {args.out}: one row per gold device")
    return 0


def _pairs_cv(args: argparse.Namespace) -> int:
    from meddevkg_core.pair_cv import headline, main_pairs_cv

    _checked_model_choices(args)
    # checked before the cross-validation, held till its outputs are written
    with claimed_directory(args.out), _models_named_by_their_options():
        report = main_pairs_cv(args.pairs, args.out, args.cross_encoder, args.device, args.hashing,
                               folds=args.folds, seed=args.seed, fda_pma=args.fda_pma,
                               cross_encoder_backend=args.cross_encoder_backend or "sentence-transformers",
                               embedding_model=args.embedding_model, embedding_backend=args.embedding_backend)
    print(json.dumps(report, indent=2, default=str))
    print(f"wrote {args.out}: pair_scores.parquet, report.json")
    print(json.dumps(headline(report)))
    return 0


def _bench_extract(args: argparse.Namespace) -> int:
    from meddevkg_core.config import CandidateConfig
    from meddevkg_core.corpus import read_corpus
    from meddevkg_core.extraction_benchmark import format_summary, measure_extraction, read_llm_entities
    from meddevkg_core.ontology import load_meddevonto

    _checked_model_choices(args)
    extraction = _extractor_settings(args)  # an LLM without its endpoint is refused before the corpus is read
    corpus = read_corpus(args.corpus)
    llm_path = Path(args.llm_entities or Path(args.corpus) / "gold_pair_llm_entities.parquet")
    if args.llm_entities and not llm_path.is_file():
        raise SystemExit(f"{llm_path}: no such file")
    llm = read_llm_entities(llm_path) if llm_path.is_file() else None
    extractors = extraction.extractors()
    with _exit_on_llm_failure(None, extractors.values()):
        result = measure_extraction(corpus, load_meddevonto(), extractors, CandidateConfig(), llm,
                                    seed=args.seed, random_pairs_per_device=args.random_pairs,
                                    n_process=args.n_process, timing_runs=args.runs,
                                    progress=lambda line: print(line, file=sys.stderr))
    print(format_summary(result))
    print(json.dumps(result))
    return 0


def _company_report(args: argparse.Namespace) -> int:
    from meddevkg_core.company_report import format_company_report, main_company_report
    from meddevkg_dagster.resources import former_owners_setting

    report = main_company_report(args.corpus, args.fda_pma, args.out,
                                 former_owners=former_owners_setting())
    print(format_company_report(report))
    if args.out:
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _bench_scale(args: argparse.Namespace) -> int:
    from meddevkg_core.scale_bench import format_scale_report, main_bench_scale

    report = main_bench_scale(args.patents, args.devices, args.seed, args.runs,
                              progress=lambda line: print(line, file=sys.stderr))
    print(format_scale_report(report))
    print(json.dumps(report, sort_keys=True))
    return 0


def _bench_embed(args: argparse.Namespace) -> int:
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


def _bench_backfill(args: argparse.Namespace) -> int:
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


def _select_devices(args: argparse.Namespace) -> int:
    from meddevkg_core.sources.device_selection import format_selection_report, main_select_devices

    report = main_select_devices(args.fda_pma, args.product_codes, args.benchmark, args.out)
    print(format_selection_report(report))
    return 0


CROSS_ENCODER_BACKENDS = ("sentence-transformers", "flagembedding")
"""cross_encoder.BACKENDS, named here so that every command does not import the models' modules to start."""
ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS = "MEDDEVKG_ENTITY_EXTRACTOR", ("spacy", "llm")
"""llm_extraction's, named here for the same reason."""
MODEL_CHOICES = {"cross_encoder_backend": ("MEDDEVKG_CROSS_ENCODER_BACKEND", CROSS_ENCODER_BACKENDS),
                 "device": ("MEDDEVKG_DEVICE", DEVICES), "embedding_backend": ("MEDDEVKG_EMBEDDING_BACKEND", BACKENDS),
                 "entity_extractor": (ENTITY_EXTRACTOR_ENV, ENTITY_EXTRACTORS)}
"""The model options that take one of a few words, by argument name: the variable of their default, the words."""


def _checked_model_choices(args: argparse.Namespace) -> None:
    """argparse holds a command-line value to its option's choices but not a default, which these options take
    from a variable: a value outside them there failed in a traceback once the corpus was read."""
    for name, (variable, choices) in MODEL_CHOICES.items():  # pairs-cv extracts no entities
        if (value := getattr(args, name, None)) is not None and value not in choices:
            raise SystemExit(f"{variable}={value!r}: expected one of {', '.join(choices)} "
                             f"(the default of --{name.replace('_', '-')})")


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


def _default_db() -> Path:
    return Path(os.environ.get("MEDDEVKG_DUCKDB", home_dir() / "warehouse.duckdb"))


def _app_tables(args: argparse.Namespace):
    """The run to answer on: a run/benchmark directory (--links) or the DuckDB store (--db, default)."""
    from meddevkg_core.app_store import from_duckdb, from_output_dir

    try:
        tables = from_output_dir(args.links, args.corpus) if args.links else from_duckdb(args.db or _default_db())
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from exc
    from dataclasses import replace

    if getattr(args, "fda_pma", None):
        from meddevkg_core.app_store import with_fda_decision_dates

        devices = tables.devices if tables.devices is not None else tables.links.select("fda_id").unique()
        tables = replace(tables, devices=with_fda_decision_dates(devices, args.fda_pma))
    if args.min_probability > 0:
        tables = replace(tables, links=tables.links.filter(pl.col("probability") >= args.min_probability))
    print(f"source: {tables.source}")
    if "rank" not in tables.links.columns:
        print("note: these links have no rank (written before links had one): patents are listed by probability")
    return tables


def _show(title: str, df: pl.DataFrame, limit: int) -> None:
    print(f"\n{title} ({df.height} rows{', first ' + str(limit) if df.height > limit else ''})")
    if df.height:  # a corpus without titles or dates would print columns of nulls
        df = df.select([c for c in df.columns if df[c].null_count() < df.height])
    with pl.Config(tbl_rows=limit, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200, fmt_table_cell_list_len=6):
        print(df.head(limit))


def _recall_rootcause(args: argparse.Namespace) -> int:
    from meddevkg_core.applications import recall_root_cause

    tables = _app_tables(args)
    if args.device:
        causes = [recall_root_cause(tables.links, fda_id=args.device, devices=tables.devices, patents=tables.patents)]
    else:
        from meddevkg_core.http_client import SourceError
        from meddevkg_core.sources.openfda_recall import OpenFDARecallClient

        try:
            with OpenFDARecallClient() as client:
                records = client.by_recall_number(args.recall_number)
        except (SourceError, ValueError) as exc:
            raise SystemExit(str(exc)) from exc  # the message names the source
        for bad in client.rejected:
            print(f"openFDA record {bad['record_key']} set aside: {bad['reason']}")
        if not records:
            raise SystemExit(f"openFDA has no device recall {args.recall_number}")
        causes = [recall_root_cause(tables.links, recall=r, devices=tables.devices, patents=tables.patents)
                  for r in records]
    for cause in causes:
        if cause.recall:
            print("\nrecall " + "; ".join(f"{k}={v}" for k, v in cause.recall.items() if v not in (None, "", [])))
            if cause.recall["pma_numbers_from"] == "product_code":
                print(f"note: the recall names no PMA or 510(k) number; these PMA numbers come from its product "
                      f"code {cause.recall['product_code']} (openFDA's openfda block: every PMA of the code), not "
                      "from the recall")
        if cause.unknown:
            print(f"not in this link set: {', '.join(cause.unknown)}")
        if cause.recall and not cause.recall["pma_numbers"]:
            print("the recall names no PMA number" + (" (a 510(k) recall: k_numbers)" if cause.recall["k_numbers"]
                                                      else "") + ": nothing to trace")
            continue
        if not cause.fda_ids:
            print("no device of this link set is named: nothing to trace")
            continue
        _show(f"patents linked to {', '.join(cause.fda_ids)}", cause.patents, args.limit)
        _show("other devices sharing those patents (by number shared)", cause.shared_devices, args.limit)
    return 0 if any(c.fda_ids for c in causes) else 1


def _unknown_device(tables: AppTables, fda_id: str) -> bool:
    """Say so when the device is not in the link set or its corpus, as recall-rootcause does."""
    from meddevkg_core.applications import known_devices

    if fda_id in known_devices(tables.links, tables.devices):
        return False
    print(f"not in this link set: {fda_id}")
    return True


def _ma_discovery(args: argparse.Namespace) -> int:
    from meddevkg_core.applications import acquired_patents, approval_date

    tables = _app_tables(args)
    if _unknown_device(tables, args.device):
        return 1
    out = acquired_patents(tables.links, tables.company_paths, args.device)
    if tables.company_paths.height == 0:
        print("note: this source has no company paths (candidates table), so no acquisition can be shown")
    approved = approval_date(tables.devices, args.device)
    print(f"FDA approval of {args.device}: {approved or 'unknown (the devices table has no date for it)'}")
    if approved and (later := out.filter(pl.col("latest_close_date") > approved).height):
        print(f"note: {later} of these links come through a deal that closed after that approval")
    _show(f"patents linked to {args.device} through an acquisition", out.drop("deal_dates", "fda_id"), args.limit)
    if out.height:
        by = (out.group_by("company_path", "latest_close_date").len("n_patents")
              .sort("n_patents", "company_path", descending=[True, False]))  # group_by's order changes per call
        _show("by acquisition path", by, args.limit)
    return 0


def _trajectory(args: argparse.Namespace) -> int:
    from meddevkg_core.applications import plot_trajectory, trajectory

    tables = _app_tables(args)
    if _unknown_device(tables, args.device):
        return 1
    traj = trajectory(tables.links, tables.patents, args.device, tables.devices)
    print(f"{traj.patents.height} linked patents; FDA approval year: {traj.decision_year or 'unknown'}")
    for note in traj.notes:
        print(f"note: {note}")
    if traj.decision_year is None and not args.fda_pma:
        print("note: the devices table has no approval date for it; --fda-pma fdadata_pma.parquet reads FDA's")
    _show("linked patents per year", traj.counts, 200)
    _show("linked patents", traj.patents, args.limit)
    if args.png:
        print(f"wrote {plot_trajectory(traj, args.png)}")
    return 0


def _views(args: argparse.Namespace) -> int:
    import duckdb

    from meddevkg_core.app_store import create_application_views

    db = Path(args.db or _default_db())
    if not db.is_file():
        raise SystemExit(f"{db}: no DuckDB store (run `meddevkg demo` first)")
    with duckdb.connect(str(db)) as con:
        counts = create_application_views(con)
    for name, n in counts.items():
        print(f"meddevkg.{name}: {n} rows")
    query = (f"import duckdb; duckdb.connect({json.dumps(str(db))}, read_only=True)"
             '.sql("select * from meddevkg.app_shared_patents limit 10").show()')
    print(f"query them with: {shlex.quote(sys.executable)} -c {shlex.quote(query)}")  # no duckdb CLI is installed
    return 0


def _partitions(args: argparse.Namespace) -> int:
    """Register device and grant-year partitions on the instance the CLI and `dagster dev` share, and
    print the run that materialises the new ones (a dynamic partition must exist before a run targets it)."""
    import dagster as dg

    from meddevkg_core.patent_years import parse_year_keys
    from meddevkg_dagster.partitions import PATENT_YEARS, PMA_DEVICES, key_ranges, patent_years, pma_devices

    def year_keys_of(option: str) -> list[str]:
        try:
            return parse_year_keys(getattr(args, option)) if getattr(args, option) else []
        except ValueError as exc:
            raise SystemExit(f"--{option.replace('_', '-')}: {exc}") from exc

    years, gone_years = year_keys_of("add_years"), year_keys_of("delete_years")
    devices = list(dict.fromkeys(_pma(d) for d in args.add_devices or []))
    # as written too: a key registered before corpus ids were upper-cased may be lower-case
    gone_devices = list(dict.fromkeys(k for d in args.delete_devices or [] for k in (_pma(d), d.strip())))
    print(f"instance: {_prepare_instance_home()}")
    jobs = {PATENT_YEARS: (years, "patents_job"), PMA_DEVICES: (devices, "device_links_job")}
    with dg.DagsterInstance.get() as instance:
        for definition, gone in ((patent_years, gone_years), (pma_devices, gone_devices)):
            if gone:
                remove_partitions(instance, definition, gone, _default_db())
        for name, (wanted, job) in jobs.items():
            keys = register_partitions(instance, name, wanted) if wanted else instance.get_dynamic_partitions(name)
            if not wanted:
                print(f"{name}: {len(keys)} partition(s)" + (f", {keys[0]} .. {keys[-1]}" if keys else ""))
            for start, end in key_ranges(wanted, keys):  # one run per stretch of neighbouring keys
                print("  " + _job_command(job, start, end))
    return 0


def remove_partitions(instance, definition, keys: list[str], db: Path) -> dict[str, int]:
    """Delete the keys' rows from every table partitioned by `definition`, in one transaction, then
    the keys themselves: rows first, so a failure leaves partitions that a run can rebuild, never
    rows that no partition names. Keys already gone from the instance only lose their rows."""
    import duckdb

    from meddevkg_dagster.definitions import defs
    from meddevkg_dagster.partitions import PMA_DEVICES, stored_partition_tables
    from meddevkg_dagster.resources import WAREHOUSE_SCHEMA

    tables = stored_partition_tables(defs.resolve_asset_graph(), definition)
    deleted: dict[str, int] = {}
    if db.is_file():
        try:
            with duckdb.connect(str(db)) as con:
                stored = {t for (t,) in con.execute("select table_name from information_schema.tables "
                                                    "where table_schema = ?", [WAREHOUSE_SCHEMA]).fetchall()}
                con.begin()
                for table, expr in tables.items():
                    if table in stored:
                        [(deleted[table],)] = con.execute(  # its one row: the number deleted
                            f'delete from {WAREHOUSE_SCHEMA}."{table}" '
                            f"where list_contains(?::varchar[], cast({expr} as varchar))", [keys]).fetchall()
                con.commit()
        except duckdb.Error as exc:
            raise SystemExit(f"{db}: no row or partition was removed ({exc})") from exc
    else:  # nothing to delete here, but maybe rows in the store the deployment uses
        print(f"{db}: no store at this path (MEDDEVKG_DUCKDB, MEDDEVKG_HOME): only the partition keys are removed")
    registered = set(instance.get_dynamic_partitions(definition.name))
    for key in keys:
        if key in registered:
            instance.delete_dynamic_partition(definition.name, key)
    absent = [k for k in keys if k not in registered]
    print(f"{definition.name}: removed {len(keys) - len(absent)} partition(s) and {sum(deleted.values())} row(s) "
          f"from {sum(1 for n in deleted.values() if n)} table(s)"
          + (f"; not partitions here (rows only): {', '.join(absent)}" if absent else ""))
    for table, n in sorted(deleted.items()):
        if n:
            print(f"  {WAREHOUSE_SCHEMA}.{table}: {n}")
    if devices := instance.get_dynamic_partitions(PMA_DEVICES):  # what read every partition still counts them
        print("  the assets that read every partition (the graph, the reranker, the evaluation, other devices' "
              "pools) still include them until meddevkg_job runs again:")
        print("  " + _job_command("meddevkg_job", devices[0], devices[-1]))
    return deleted


def _job_command(job: str, start: str, end: str) -> str:
    """The `dagster job execute` line that runs `job` over the partition range start..end."""
    from meddevkg_dagster.partitions import range_tags

    return dagster_command(os.environ, ["job", "execute", "-m", "meddevkg_dagster.definitions", "-j", job,
                                        "--tags", json.dumps(range_tags(start, end))])


def _pma(value: str) -> str:
    return value.strip().upper()


def _add_app_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="DuckDB store (default $MEDDEVKG_DUCKDB or $MEDDEVKG_HOME/warehouse.duckdb)")
    p.add_argument("--links", help="a `meddevkg run`/`benchmark` output directory instead of the store")
    p.add_argument("--corpus", help="with --links: the corpus directory (default: the one named by the newer of "
                   "its report.json and summary.json, else $MEDDEVKG_CORPUS)")
    p.add_argument("--limit", type=int, default=20, help="rows printed per table")
    p.add_argument("--min-probability", type=float, default=0.0,
                   help="only links at least this probable (the link set also keeps low-probability immune links)")


def _register_applications(sub) -> None:
    """recall-rootcause, ma-discovery, trajectory, views: the paper's applications on a finished run."""
    rc = sub.add_parser("recall-rootcause", help="patents behind a recalled device, and the devices sharing them")
    which = rc.add_mutually_exclusive_group(required=True)
    which.add_argument("--device", type=_pma, help="PMA number of the device (e.g. P130021)")
    which.add_argument("--recall-number", help="openFDA device recall number (e.g. Z-0313-2007), fetched live")
    _add_app_source(rc)
    rc.set_defaults(func=_recall_rootcause)
    ma = sub.add_parser("ma-discovery", help="a device's linked patents reached through an acquisition")
    ma.add_argument("--device", required=True, type=_pma, help="PMA number of the device")
    _add_app_source(ma)
    ma.set_defaults(func=_ma_discovery)
    tr = sub.add_parser("trajectory", help="a device's linked patents by filing and grant year (table, PNG)")
    tr.add_argument("--device", required=True, type=_pma, help="PMA number of the device")
    tr.add_argument("--png", help="also draw the counts per year into this PNG")
    tr.add_argument("--fda-pma", help="fdadata_pma.parquet: approval dates for devices the corpus has none for")
    _add_app_source(tr)
    tr.set_defaults(func=_trajectory)
    vw = sub.add_parser("views", help="create the app_* DuckDB views over the store's tables")
    vw.add_argument("--db", help="DuckDB store (default $MEDDEVKG_DUCKDB or $MEDDEVKG_HOME/warehouse.duckdb)")
    vw.set_defaults(func=_views)


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
    demo.set_defaults(func=_demo)
    parts = sub.add_parser("partitions", help="list the instance's device and grant-year partitions, add some and "
                           "print the run that materialises them, or remove some with their stored rows")
    parts.add_argument("--add-years", help="grant years: 2019, 1976-2026 or undated, comma-separated")
    parts.add_argument("--add-devices", nargs="+", metavar="PMA", help="PMA numbers (P240003 ...)")
    parts.add_argument("--delete-years", help="grant years to remove (as --add-years), with their rows in the "
                       "store")
    parts.add_argument("--delete-devices", nargs="+", metavar="PMA",
                       help="PMA numbers to remove, with their rows in the store (also rows a partition deleted "
                            "in the UI left behind)")
    parts.set_defaults(func=_partitions)
    run = sub.add_parser("run", help="run the pipeline on a corpus directory and write Parquet outputs")
    run.add_argument("--corpus", required=True, help="corpus directory (devices, patents, gold_links)")
    run.add_argument("--out", required=True, help="output directory")
    _add_fda_pma_option(run, "the dossier_lexical score; without it that score is missing")
    _add_config_option(run)
    _add_model_options(run)
    _add_entity_extractor_option(run)
    run.set_defaults(func=_run)
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
    bench.set_defaults(func=_benchmark)
    cmp = sub.add_parser("compare-runs", help="two sets of benchmark runs compared gold device by gold device, "
                         "with a Wilcoxon signed-rank test")
    cmp.add_argument("--corpus", required=True, help="the corpus the runs were benchmarked on (its gold_links)")
    cmp.add_argument("--a", nargs="+", required=True, help="benchmark output directories of side a (one per seed)")
    cmp.add_argument("--b", nargs="+", required=True, help="benchmark output directories of side b")
    cmp.add_argument("--out", help="also write the per-device frame to this Parquet file")
    cmp.set_defaults(func=_compare_runs)
    pcv = sub.add_parser("pairs-cv",
                         help="device-grouped cross-validation of pair classifiers on a labelled pair file")
    pcv.add_argument("--pairs", required=True, help="file with fda_id, pat_id, device_text, patent_text, label")
    pcv.add_argument("--out", required=True, help="output directory")
    pcv.add_argument("--folds", type=int, default=5,
                     help="cross-validation folds, each holding out whole device groups (devices sharing a device "
                          "text, a patent or a patent text) (default %(default)s)")
    pcv.add_argument("--seed", type=int, default=42,
                     help="seed of the fold split and of XGBoost; the repeated splits of the report take the seeds "
                          "after it (default %(default)s)")
    pcv.add_argument("--hashing", action="store_true",
                     help="model-free hashing encoder (fast dry run): --embedding-model hashing, whatever "
                          "$MEDDEVKG_EMBEDDING_MODEL says")
    _add_fda_pma_option(pcv, "the dossier TF-IDF features")
    _add_model_options(pcv, cache=False)  # each run encodes its pairs' texts once: nothing to reuse
    pcv.set_defaults(func=_pairs_cv)
    bex = sub.add_parser("bench-extract", help="entity extraction: throughput, coverage, discrimination, LLM recall")
    bex.add_argument("--corpus", required=True, help="corpus directory (devices, patents, gold_links)")
    bex.add_argument("--llm-entities", help="LLM entities per gold pair (default: gold_pair_llm_entities.parquet "
                     "in the corpus directory, if present)")
    bex.add_argument("--runs", type=int, default=3,
                     help="timed runs per n_process value (median reported; default %(default)s); the LLM is timed "
                     "in one run, since a second would read the replies of the first")
    bex.add_argument("--n-process", type=int, nargs="+", default=[1, 2],
                     help="spaCy process counts to time (not applicable to the LLM)")
    bex.add_argument("--random-pairs", type=int, default=20, help="random non-gold pairs per gold device")
    bex.add_argument("--seed", type=int, default=42,
                     help="seed of the random non-gold pairs drawn per gold device (default %(default)s)")
    _add_entity_extractor_option(bex)
    bex.set_defaults(func=_bench_extract)
    crep = sub.add_parser("company-report", help="company resolution: FDA sponsor agreement, cross-company gold, "
                          "extra same-company pairs")
    crep.add_argument("--corpus", required=True, help="corpus directory (devices, patents, gold_links)")
    crep.add_argument("--fda-pma", required=True,
                      help="fdadata_pma.parquet (raw FDA sponsor names and decision dates)")
    crep.add_argument("--out", help="also write the full report (with its lists) as a JSON file")
    crep.set_defaults(func=_company_report)
    bsc = sub.add_parser("bench-scale", help="Stage 2 + 3 over a synthetic corpus of the paper's size (no encoder)")
    bsc.add_argument("--patents", type=int, default=698_191,
                     help="patents in the synthetic corpus (default %(default)s: the paper's count)")
    bsc.add_argument("--devices", type=int, default=434,
                     help="devices in the synthetic corpus (default %(default)s: the paper's count)")
    bsc.add_argument("--runs", type=int, default=1, help="timed runs of each stage (medians reported; default "
                     "%(default)s)")
    bsc.add_argument("--seed", type=int, default=0,
                     help="seed of the synthetic corpus and its gold links (default %(default)s)")
    bsc.set_defaults(func=_bench_scale)
    bem = sub.add_parser("bench-embed", help="texts/s of the CPU embedding paths (torch fp32 and int8, ONNX fp32 "
                         "and int8), and their agreement with fp32")
    bem.add_argument("--corpus", required=True, help="corpus directory whose patent texts to encode")
    bem.add_argument("--texts", type=int, default=500,
                     help="patent texts encoded, a sample of the corpus's when it has more (default %(default)s)")
    bem.add_argument("--runs", type=int, default=3,
                     help="timed passes of every path, interleaved (median reported; default %(default)s)")
    bem.add_argument("--batch-size", type=int, default=32, help="texts per forward pass, the same for every path")
    bem.set_defaults(func=_bench_embed)
    bbf = sub.add_parser("bench-backfill", help="a backfill of every device partition through Dagster vs the same "
                         "work through the core (ratio of medians)")
    bbf.add_argument("--corpus", required=True, help="corpus directory")
    bbf.add_argument("--runs", type=int, default=3,
                     help="timed runs of the Dagster backfill and of the core (median of each; default %(default)s)")
    bbf.add_argument("--home", help="MEDDEVKG_HOME for the run, kept afterwards "
                     "(default: a temporary directory, removed at the end)")
    bbf.add_argument("--patent-copies", type=int, default=1, help="link the devices against this many copies of "
                     "the stored patents (ids suffixed ~i), to see the ratio at a larger patent corpus")
    bbf.set_defaults(func=_bench_backfill)
    sel = sub.add_parser("select-devices", help="the paper's cardiovascular device selection on FDA PMA records, "
                         "compared with a benchmark's devices")
    sel.add_argument("--fda-pma", required=True, help="fdadata_pma.parquet (every PMA decision)")
    sel.add_argument("--product-codes", required=True, help="fdadata_product_codes.parquet (FDA classification)")
    sel.add_argument("--benchmark", required=True, help="corpus directory whose devices to compare with")
    sel.add_argument("--out", help="also write the selected devices as a devices table (Parquet)")
    sel.set_defaults(func=_select_devices)
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


if __name__ == "__main__":
    sys.exit(main())
