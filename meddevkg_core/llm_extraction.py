"""Optional LLM entity extractor, interchangeable with the offline spaCy one (METHOD.md §2.1, §6).

The paper's Stage 1: one schema-constrained prompt per domain ("Precision Extractor" for PMA
texts, "Patent Decoder" for patents; versioned files in data/prompts/) returns
{"entities": [{"span", "type", "standardized_name"}]}. Then, unlike the paper (METHOD §9.14):

- the reply is validated by pydantic: unreadable JSON or a reply without an entity list makes the
  document a recorded failure; a single malformed entity is rejected on its own;
- the prompt's hard rules are enforced after the answer (forbidden names, 1-10 word spans);
- every span is grounded with grounding.ground_span (Quote-then-Verify); a span not in the text
  is a hallucination, rejected and kept in `rejected`;
- `standardized_name` is normalised and mapped to the ontology exactly like a spaCy mention
  (concept_mapping.map_phrase), with the span's own wording as a fallback, so the output is the
  same schemas.MENTIONS table: one mention per (doc, norm) at its first offset.

Replies are cached as JSON files keyed by sha256(prompt id, prompt text, model, document text):
a re-run with the same inputs sends no request. Failed documents are not cached, so a re-run
retries them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

import polars as pl
from pydantic import BaseModel, ConfigDict, ValidationError

from meddevkg_core import schemas
from meddevkg_core.concept_mapping import COMPONENT, MECHANISM, ConceptMatch, map_phrase
from meddevkg_core.entities import ExtractionResult
from meddevkg_core.errors import InputError
from meddevkg_core.grounding import ground_span
from meddevkg_core.home import home_dir
from meddevkg_core.llm_client import ENV_PREFIX, ChatClient, LLMConfig, LLMRequestError
from meddevkg_core.ontology import Ontology, normalize_term
from meddevkg_core.progress import Progress, no_progress
from meddevkg_core.unstorable_text import LONE_SURROGATE

if TYPE_CHECKING:
    from spacy.language import Language

log = logging.getLogger(__name__)

Domain = Literal["device", "patent"]
USER_MARKER = "=== USER ==="
ENTITY_TYPES = {"LINK_COMPONENT": COMPONENT, "LINK_MECHANISM": MECHANISM}
MAX_SPAN_WORDS = 10
FORBIDDEN_NAMES = frozenset({"therapy delivery", "treatment", "delivery system", "information not available"})
FORBIDDEN_ALONE = frozenset(
    "device system kit tool apparatus unit method processor memory server database computer network".split()
)
"""METHOD §6: forbidden outright (FDA prompt), and forbidden as a whole name (both prompts)."""


# --- prompt ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """A versioned prompt: `id` (e.g. "device_entities_v1") and `sha256` of the text key the cache."""

    id: str
    system: str
    user_template: str
    sha256: str

    def messages(self, text: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": self.user_template.replace("{text}", text)}]


def load_prompt(domain: Domain, version: str = "v1") -> Prompt:
    """The packaged prompt data/prompts/{domain}_entities_{version}.txt."""
    prompt_id = f"{domain}_entities_{version}"
    path = resources.files("meddevkg_core") / "data" / "prompts" / f"{prompt_id}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"no prompt {prompt_id!r} in meddevkg_core/data/prompts")
    raw = path.read_text(encoding="utf-8")
    system, sep, user = raw.partition(USER_MARKER + "\n")
    if not sep or "{text}" not in user:
        raise ValueError(f"prompt {prompt_id} needs a '{USER_MARKER}' line followed by a template with {{text}}")
    return Prompt(prompt_id, system.strip(), user.strip(), hashlib.sha256(raw.encode()).hexdigest())


# --- reply schema ---------------------------------------------------------------------------


class LLMEntity(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    span: str
    type: Literal["LINK_COMPONENT", "LINK_MECHANISM"]
    standardized_name: str


class ReplyError(ValueError):
    """The reply is not {"entities": [...]} JSON: the whole document is a failure."""


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_reply(content: str) -> tuple[list[LLMEntity], list[tuple[object, str]]]:
    """Valid entities, and (item, reason) for each malformed one; ReplyError if the reply is unusable.
    A Markdown code fence around the JSON is tolerated."""
    if m := _FENCE.match(content):
        content = m.group(1)
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        raise ReplyError(f"reply is not JSON ({exc.msg} at char {exc.pos}): {content[:200]!r}") from None
    except RecursionError:  # a model stuck repeating "[[[[..." until max_tokens
        raise ReplyError(f"reply is JSON nested too deeply to read: {content[:200]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("entities"), list):
        raise ReplyError(f'reply is not {{"entities": [...]}}: {content[:200]!r}')
    valid, invalid = [], []
    for item in data["entities"]:
        try:
            valid.append(LLMEntity.model_validate(item))
        except ValidationError as exc:
            errors = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entity'}: {e['msg']}" for e in exc.errors())
            invalid.append((item, f"schema violation: {errors}"))
    return valid, invalid


def rule_violation(entity: LLMEntity) -> str | None:
    """The prompt's hard rules, checked after the answer (METHOD §9.14); None if the entity passes."""
    words = len(entity.span.split())
    if not 1 <= words <= MAX_SPAN_WORDS:
        return f"rule violation: span has {words} words (1-{MAX_SPAN_WORDS} allowed)"
    name = normalize_term(entity.standardized_name)
    if not name:
        return "rule violation: empty standardized_name"
    if name in FORBIDDEN_NAMES or name in FORBIDDEN_ALONE:
        return f"rule violation: forbidden name {entity.standardized_name!r}"
    return None


# --- cache ----------------------------------------------------------------------------------


def cache_key(prompt: Prompt, model: str, text: str) -> str:
    return hashlib.sha256("\x00".join((prompt.id, prompt.sha256, model, text)).encode()).hexdigest()


@dataclass(frozen=True)
class ResponseCache:
    """One JSON file per reply, <dir>/<key[:2]>/<key>.json, written atomically (temp file + rename)."""

    directory: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        path = self._path(key)
        try:
            content = json.loads(path.read_text(encoding="utf-8"))["content"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # a damaged entry is just a miss
            log.warning("ignoring unreadable LLM cache entry %s: %s", path, exc)
            return None
        if not isinstance(content, str):
            log.warning("ignoring LLM cache entry %s: its content is a %s, not a reply text", path,
                        type(content).__name__)
            return None
        return content

    def put(self, key: str, content: str, meta: dict[str, str]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".partial")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({**meta, "content": content}, fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*/*.json")) if self.directory.is_dir() else 0


# --- extractors -----------------------------------------------------------------------------


@runtime_checkable
class EntityExtractor(Protocol):
    """What Stage 1 needs: documents (doc_id, text) in, grounded mentions and rejects out; `progress`
    hears of the documents done, as the caller's other long stages report theirs."""

    def extract_mentions(self, docs: pl.DataFrame, ontology: Ontology,
                         progress: Progress = no_progress) -> ExtractionResult: ...

    def figures(self) -> dict[str, str | int | float]:
        """Which extractor ran and, for an LLM, its model and the counts of its calls so far: what a run's
        summary and an asset's metadata record (never a key)."""
        ...

    def close(self) -> None:
        """Release what the extractor holds open (an LLM's HTTP client)."""
        ...


DOMAINS: tuple[Domain, ...] = ("device", "patent")


@dataclass(frozen=True)
class SpacyEntityExtractor:
    """The default offline extractor (entities.extract_mentions, with its defaults) behind the
    EntityExtractor interface."""

    nlp: Language
    batch_size: int = 256
    n_process: int = 1

    def extract_mentions(self, docs: pl.DataFrame, ontology: Ontology,
                         progress: Progress = no_progress) -> ExtractionResult:
        from meddevkg_core.entities import extract_mentions

        return extract_mentions(docs, ontology, self.nlp, batch_size=self.batch_size, n_process=self.n_process,
                                progress=progress)

    def figures(self) -> dict[str, str | int | float]:
        return {"extractor": "spacy"}

    def close(self) -> None:
        pass


def spacy_extractors(nlp: Language) -> dict[Domain, EntityExtractor]:
    """spaCy's extractor for device and patent texts alike (it has no per-domain prompt)."""
    spacy = SpacyEntityExtractor(nlp)
    return dict.fromkeys(DOMAINS, spacy)


class LLMUnavailableError(RuntimeError):
    """Too many documents in a row, or every document of a call, failed at the HTTP level: the endpoint
    is down or misconfigured, and an empty result would read as documents without entities."""


@dataclass
class LLMRunStats:
    documents: int = 0
    cache_hits: int = 0
    requests: int = 0  # documents sent (HTTP attempts are in client.stats)
    failed_documents: int = 0
    entities: int = 0
    rejected_entities: int = 0


@dataclass
class LLMEntityExtractor:
    """Stage-1 extraction with an LLM: `extract_mentions(docs, ontology)` like SpacyEntityExtractor.

    One extractor per domain (device or patent prompt). Documents are sent one at a time, paced by
    the client's rate limiter. LLMAuthError and LLMUnavailableError stop the run; any other
    failure is recorded in `rejected` for that document and the run goes on, as long as some
    document of the call got a reply.
    """

    config: LLMConfig
    domain: Domain
    client: ChatClient | None = None
    enforce_rules: bool = True
    stats: LLMRunStats = field(default_factory=LLMRunStats)

    def __post_init__(self) -> None:
        self.prompt = load_prompt(self.domain, self.config.prompt_version)
        self.cache = ResponseCache(self.config.cache_dir) if self.config.cache_dir is not None else None
        self._memo: dict[str, str] = {}  # replies of this process, so duplicate texts are sent once

    def extract_mentions(self, docs: pl.DataFrame, ontology: Ontology,
                         progress: Progress = no_progress) -> ExtractionResult:
        rows = docs.select(pl.col("doc_id").cast(pl.String), pl.col("text").cast(pl.String)).rows()
        mentions: list[dict] = []
        rejected: list[dict] = []
        consecutive = sent = answered = 0
        last_failure: LLMRequestError | None = None
        for done, (doc_id, text) in enumerate(rows):
            progress(done, len(rows))
            if doc_id is None or not (text or "").strip():
                rejected.append(_reject(doc_id, "missing doc_id" if doc_id is None else "missing text", {}))
                continue
            self.stats.documents += 1
            sent += 1
            key = cache_key(self.prompt, self.config.model, text)
            try:
                content, fresh = self._reply(key, text)
                valid, invalid = parse_reply(content)
            except (LLMRequestError, ReplyError) as exc:
                self.stats.failed_documents += 1
                if isinstance(exc, LLMRequestError) and exc.status != 200:
                    last_failure = exc
                else:  # the endpoint answered, with something unusable
                    answered += 1
                kind = "llm request failed" if isinstance(exc, LLMRequestError) else "llm reply invalid"
                rejected.append(_reject(doc_id, f"{kind}: {exc}", {}))
                consecutive = consecutive + 1 if isinstance(exc, LLMRequestError) else 0
                if consecutive >= self.config.max_consecutive_failures:
                    raise LLMUnavailableError(f"{consecutive} documents in a row failed; last: {exc}") from exc
                continue
            consecutive = 0
            answered += 1
            self._store(key, content, fresh)
            rejected += [_reject(doc_id, reason, {"entity": item}) for item, reason in invalid]
            doc_mentions, doc_rejected = self._ground(doc_id, text, valid, ontology)
            mentions += doc_mentions
            rejected += doc_rejected
            self.stats.entities += len(valid) + len(invalid)
            self.stats.rejected_entities += len(invalid) + len(doc_rejected)
        if sent and not answered:  # fewer documents than the failure limit (one device partition is one)
            raise LLMUnavailableError(f"no reply to any of the {sent} document(s) sent; last: {last_failure}")
        progress(len(rows), len(rows))
        return ExtractionResult(
            mentions=schemas.conform(pl.DataFrame(mentions, schema=schemas.MENTIONS), schemas.MENTIONS),
            rejected=schemas.conform(pl.DataFrame(rejected, schema=schemas.REJECTED_RECORDS),
                                     schemas.REJECTED_RECORDS),
        )

    def figures(self) -> dict[str, str | int | float]:
        http = self.client.stats if self.client is not None else None
        return {"extractor": "llm", "llm_model": self.config.model,
                **{f"llm_{k}": v for k, v in asdict(self.stats).items()},
                "llm_http_attempts": http.requests if http else 0, "llm_retries": http.retries if http else 0}

    def close(self) -> None:
        """Close the HTTP client (if this extractor opened one)."""
        if self.client is not None:
            self.client.close()

    def _client(self) -> ChatClient:
        if self.client is None:
            self.client = ChatClient(self.config)
        return self.client

    def _reply(self, key: str, text: str) -> tuple[str, bool]:
        """The reply text, and whether it is new (not from the memo or the disk cache)."""
        if (content := self._memo.get(key)) is None and self.cache is not None:
            content = self.cache.get(key)
        if content is not None:
            self.stats.cache_hits += 1
            return content, False
        self.stats.requests += 1
        return self._client().complete(self.prompt.messages(text)), True

    def _store(self, key: str, content: str, fresh: bool) -> None:
        """Keep a usable reply in memory, and a new one on disk when a cache_dir is set."""
        self._memo[key] = content
        if fresh and self.cache is not None:
            self.cache.put(key, content, {"prompt": self.prompt.id, "model": self.config.model})

    def _ground(self, doc_id: str, text: str, entities: list[LLMEntity],
                ontology: Ontology) -> tuple[list[dict], list[dict]]:
        """Quote-then-Verify and concept mapping; one mention per norm at its first offset."""
        kept: dict[str, dict] = {}
        rejected = []
        for entity in entities:
            record = {"entity": entity.model_dump()}
            if self.enforce_rules and (reason := rule_violation(entity)) is not None:
                rejected.append(_reject(doc_id, reason, record))
                continue
            grounding = ground_span(entity.span, text)
            if grounding is None:
                rejected.append(_reject(doc_id, "span not found in text", record))
                continue
            mention = text[grounding.start:grounding.end]
            norm = normalize_term(entity.standardized_name) or normalize_term(mention)
            match = map_phrase(norm, ontology)
            if match.concept_id is None and (surface := normalize_term(mention)) and surface != norm:
                fallback = map_phrase(surface, ontology)  # the quoted wording may be in the ontology
                if fallback.concept_id is not None:
                    match = ConceptMatch(norm, fallback.concept_id, fallback.map_tier)
            row: dict[str, Any] = {
                "doc_id": doc_id, "mention": mention, "start": grounding.start, "end": grounding.end,
                "entity_type": ENTITY_TYPES[entity.type], "norm": norm, "concept_id": match.concept_id,
                "map_tier": match.map_tier, "grounding": grounding.kind}
            if norm not in kept or (row["start"], -row["end"]) < (kept[norm]["start"], -kept[norm]["end"]):
                kept[norm] = row
        return sorted(kept.values(), key=lambda r: (r["start"], r["end"], r["norm"])), rejected


def _reject(doc_id: str | None, reason: str, record: dict) -> dict:
    payload = {"doc_id": doc_id, "extractor": "llm", **record}
    text = json.dumps(payload, ensure_ascii=False, default=str)
    if LONE_SURROGATE.search(text):  # an entity pydantic refused for a lone surrogate: keep its \u escape
        text = json.dumps(payload, default=str)
    return {"source": "entities", "record_key": doc_id, "reason": reason, "record": text}


# --- the choice of extractor ----------------------------------------------------------------

ExtractorName = Literal["spacy", "llm"]
ENTITY_EXTRACTOR_ENV = "MEDDEVKG_ENTITY_EXTRACTOR"
ENTITY_EXTRACTORS: tuple[str, ...] = get_args(ExtractorName)


def default_llm_cache_dir() -> Path:
    """Where LLM replies are cached unless MEDDEVKG_LLM_CACHE_DIR says otherwise."""
    return home_dir() / "llm_cache"


class ExtractorSettings(BaseModel, frozen=True):
    """Stage 1's extractor as MEDDEVKG_ENTITY_EXTRACTOR and the MEDDEVKG_LLM_* settings choose it: the one
    place the Dagster `entity_extractor` resource and `meddevkg run`/`benchmark` turn them into extractors,
    so both paths read a setting alike and name it alike when it is wrong."""

    extractor: ExtractorName = "spacy"
    llm: LLMConfig | None = None
    """With `llm`: where and how to call it (its key a SecretStr, so never in a repr)."""

    @classmethod
    def read(cls, extractor: str, llm_settings: Mapping[str, str | None]) -> ExtractorSettings:
        """`extractor` and, for `llm`, the MEDDEVKG_LLM_* values of `llm_settings` by variable name (unset or
        empty: the default; the reply cache default_llm_cache_dir). A wrong or missing one is an InputError in
        one line naming its variable and never a key's value; with spaCy the LLM settings are not read."""
        if extractor not in ENTITY_EXTRACTORS:
            raise InputError(f"{ENTITY_EXTRACTOR_ENV}={extractor!r}: expected one of {', '.join(ENTITY_EXTRACTORS)}")
        if extractor == "spacy":
            return cls()
        values = {name: value for name, value in llm_settings.items() if name.startswith(ENV_PREFIX) and value}
        values.setdefault(ENV_PREFIX + "CACHE_DIR", str(default_llm_cache_dir()))
        try:
            return cls(extractor="llm", llm=LLMConfig.from_env(values))
        except ValidationError as exc:  # its text spans lines and repeats the value: one line, no value
            raise InputError("; ".join(f"{ENV_PREFIX}{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}"
                                       for e in exc.errors())) from None
        except ValueError as exc:  # a missing base URL or model, named by LLMConfig.from_env
            raise InputError(str(exc)) from None

    def extractor_for(self, domain: Domain) -> EntityExtractor:
        """A new extractor of `domain`'s texts: spaCy's (loaded once per process), or the LLM's with the
        domain's prompt, opening its HTTP client on its first request (`close` it when done)."""
        if self.llm is None:
            from meddevkg_core.entities import load_spacy_pipeline

            return SpacyEntityExtractor(load_spacy_pipeline())
        return LLMEntityExtractor(self.llm, domain)

    def extractors(self) -> dict[Domain, EntityExtractor]:
        """An extractor of each domain, as pipeline.Models holds them."""
        return {domain: self.extractor_for(domain) for domain in DOMAINS}
