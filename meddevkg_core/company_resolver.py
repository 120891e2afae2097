"""Company resolution that knows corporate history (METHOD.md §3.1, §7).

The paper compares upper-cased canonical names exactly and so misses every roll-up its dictionary
lacks (CardioMEMS, EndoSense, Nellcor, ev3, Sorin ...) and ignores when a deal closed. Here a raw
name is normalised (company_names), mapped through a shipped alias table (company_tables), and
companies are related through a dated acquisition graph, so that a patent of an acquired company
counts for the acquirer only from the close date on, and every match carries its evidence path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import polars as pl
from rapidfuzz import fuzz, process

from meddevkg_core import schemas
from meddevkg_core.company_names import LEGAL_TAIL, LEGAL_TAIL_PAIRS, normalize_company, split_assignees
from meddevkg_core.company_tables import (
    acquisitions_frame,
    aliases_frame,
    alliances_frame,
    normalized_aliases,
    read_company_tables,
)
from meddevkg_core.errors import CorpusError
from meddevkg_core.lineage import InputFile

MatchKind = Literal["same", "acquired", "acquirer", "former_owner", "partner"]
Method = Literal["alias", "exact", "fuzzy", "unknown"]

KIND_RANK = {"same": 0, "acquired": 1, "acquirer": 2, "former_owner": 3, "partner": 4}
_PARENS = re.compile(r"\([^)]*\)")

# A co-assignee the benchmark ran into a company name ("NOVOSTE EMORY UNIVERSITY") is split off only
# when it reads as an institution's name; a company name followed by other words is left whole.
_INSTITUTION = frozenset(
    "UNIVERSITY UNIVERSITE UNIVERSITA UNIVERSITAT UNIVERSIDAD UNIV COLLEGE INSTITUTE INSTITUT INSTITUTET "
    "INSTITUTO ISTITUTO FOUNDATION FONDATION FUNDACION FUNDACIO HOSPITAL HOSPITALS CLINIC CLINICS KLINIKUM "
    "CLINIQUES REGENTS TRUSTEES INSERM CNRS ACADEMY SCHOOL".split()
)


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Resolution:
    raw: str | None
    normalized: str | None
    company_id: str | None
    method: Method
    score: float | None


@dataclass(frozen=True)
class CompanyMatch:
    kind: MatchKind
    path: str


@dataclass(frozen=True)
class Deal:
    """One acquisition edge; `until` is when the acquired company passed to another owner."""

    acquirer: str
    acquired: str
    close_date: date
    until: date | None = None
    source: str | None = field(default=None, compare=False)  # where the deal is recorded; no part of matching


@dataclass(frozen=True)
class Alliance:
    """A dated development and licence agreement: each side's patents may cover the other's devices."""

    company_a: str
    company_b: str
    start_date: date
    end_date: date | None = None
    source: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Reach:
    """A company a device company reaches, the evidence, and the dates it holds for.

    `valid_from`/`valid_until` bound the years the device was on the market (`holds`);
    `patent_from`/`patent_until`, set only for a former owner, bound the patent's grant date (the
    years the owner held the line).
    """

    target: str
    kind: MatchKind
    path: str
    valid_from: date | None
    valid_until: date | None
    steps: int
    patent_from: date | None = None
    patent_until: date | None = None

    def holds(self, when: date | None, last: date | None = None) -> bool:
        """Whether the reach held while a device approved on `when` was on the market: up to its
        latest FDA decision `last` (a supplement), else on its approval day only.

        A device stays its holder's product after a deal: the acquirer, or today's owner it is
        filed under, marks the acquired company's patents on it from then on (CardioMEMS's sensor,
        approved in 2014, bears CardioMEMS's patents under Abbott, its owner since 2017).
        """
        if when is None:
            return True
        if self.valid_from is not None and max(when, last or when) < self.valid_from:
            return False
        return self.valid_until is None or when < self.valid_until

    def covers(self, granted: date | int | None) -> bool:
        """Whether a patent granted then (a date, or only its year) is within the reach's patent window.

        Without a window every patent is; with one, a patent of unknown grant date is not, and a
        bare year counts when it overlaps the window (the window's own dates are often year ends).
        """
        if self.patent_from is None and self.patent_until is None:
            return True
        if granted is None:
            return False
        if isinstance(granted, date):
            return ((self.patent_from is None or granted >= self.patent_from)
                    and (self.patent_until is None or granted < self.patent_until))
        return ((self.patent_from is None or granted >= self.patent_from.year)
                and (self.patent_until is None or granted <= self.patent_until.year))


# --------------------------------------------------------------------------- resolver


class AliasClash(ValueError):
    """An alias names a company that is itself a canonical id (of an alias, a deal or an alliance)."""


@dataclass(frozen=True, eq=False)
class CompanyResolver:
    """Raw name -> canonical company id, plus the dated M&A graph between ids.

    Date rules (documented in data/companies/README.md):
    - "acquired": the patent's company was bought (directly or through a chain) by the device's
      company; holds for devices approved on/after every close date on the path and before the
      acquired company passed to another owner. A missing device date is allowed.
    - "acquirer": the patent's company bought the device's company (the product line moved to it);
      no date bound, because the acquirer's later patents cover the line and a former parent's
      patents stay with it after a divestiture.
    - "former_owner" (`former_owners=True`, the default): the patent's company owned a company
      the device's company later bought, and sold it on before (or when) that purchase closed; its
      patents granted while it held that company stay with the line it sold ("ENDOLOGIX <-
      TRIVASCULAR (2016-02-03) -> BOSTON SCIENTIFIC (2005-04-18)"). Holds for the same device
      dates as the "acquired" path it extends, and only for patents granted in the owner's years
      (`Reach.covers`; unbounded, it paired every device of the buyer with every patent of the
      seller).
    - "partner" (`alliances`): the two companies signed a development and licence agreement; each
      side's patents count for the other's devices approved from its start on.
    Measured effects on the benchmark are in data/companies/README.md ("Measuring").
    """

    aliases: Mapping[str, str]
    deals: tuple[Deal, ...]
    fuzzy_cutoff: float = 92.0
    fuzzy_min_length: int = 6
    former_owners: bool = True
    alliances: tuple[Alliance, ...] = ()
    rejected: pl.DataFrame = field(default_factory=lambda: schemas.empty(schemas.REJECTED_RECORDS), repr=False)
    """Rows of the corpus's own company tables quarantined with their reason (`read_company_tables`)."""
    inputs: Mapping[str, InputFile] = field(default_factory=dict, repr=False)
    """The corpus's own company tables' files, by table, with their bytes' digest (lineage)."""
    canonical: frozenset[str] = field(init=False)
    _choices: tuple[str, ...] = field(init=False, repr=False)
    _reach: Mapping[str, tuple[Reach, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        canonical = (frozenset(self.aliases.values()) | {n for d in self.deals for n in (d.acquirer, d.acquired)}
                     | {n for a in self.alliances for n in (a.company_a, a.company_b)})
        clash = {a: c for a, c in self.aliases.items() if a in canonical and a != c}
        if clash:
            raise AliasClash(f"aliases would re-map known companies: {clash}")
        down: dict[str, list[Deal]] = {}
        up: dict[str, list[Deal]] = {}
        for deal in self.deals:
            down.setdefault(deal.acquirer, []).append(deal)
            up.setdefault(deal.acquired, []).append(deal)
        partners: dict[str, list[tuple[str, Alliance]]] = {}
        for alliance in self.alliances:
            partners.setdefault(alliance.company_a, []).append((alliance.company_b, alliance))
            partners.setdefault(alliance.company_b, []).append((alliance.company_a, alliance))
        reach = {c: _enumerate(c, down, up, self.former_owners, partners.get(c, ())) for c in canonical}
        object.__setattr__(self, "canonical", canonical)
        object.__setattr__(self, "_choices", tuple(sorted(canonical)))
        object.__setattr__(self, "_reach", MappingProxyType(reach))

    # ---- construction

    @classmethod
    def default(cls, fuzzy_cutoff: float = 92.0) -> CompanyResolver:
        return _default_resolver(fuzzy_cutoff)

    def with_former_owners(self, enabled: bool = True) -> CompanyResolver:
        """The same tables with the "former_owner" relation switched on (or off)."""
        return self if enabled == self.former_owners else replace(self, former_owners=enabled)

    def ownership_only(self) -> CompanyResolver:
        """Only who owns whom: no former owners, no alliances (what the company match was before them)."""
        return replace(self, former_owners=False, alliances=())

    @property
    def acquisitions(self) -> pl.DataFrame:
        """The deals this resolver knows (shipped plus corpus-specific), as schemas.ACQUISITIONS."""
        rows = [{"acquirer": d.acquirer, "acquired": d.acquired, "close_date": d.close_date, "source": d.source}
                for d in self.deals]
        return schemas.conform(pl.DataFrame(rows, schema_overrides={"close_date": pl.Date}), schemas.ACQUISITIONS)

    @property
    def alliance_table(self) -> pl.DataFrame:
        """The alliances this resolver knows, as schemas.ALLIANCES."""
        rows = [(a.company_a, a.company_b, a.start_date, a.end_date, a.source) for a in self.alliances]
        return pl.DataFrame(rows, schema=schemas.ALLIANCES, orient="row")

    @classmethod
    def for_corpus(cls, corpus_dir: Path | str, fuzzy_cutoff: float = 92.0, former_owners: bool = True
                   ) -> CompanyResolver:
        """Shipped tables plus a corpus directory's own `aliases` / `acquisitions` / `alliances`
        tables, if any (`read_company_tables`); the rows quarantined from them are `rejected`."""
        extra = read_company_tables(corpus_dir)
        if extra is None:
            return cls.default(fuzzy_cutoff).with_former_owners(former_owners)
        try:
            resolver = cls.from_frames(pl.concat([aliases_frame(), extra.aliases]),
                                       pl.concat([acquisitions_frame(), extra.acquisitions]), fuzzy_cutoff,
                                       pl.concat([alliances_frame(), extra.alliances]))
        except AliasClash as exc:  # the shipped tables alone have none
            raise CorpusError(f"{corpus_dir}: its company tables ({', '.join(extra.sources)}) cannot be used: {exc} "
                              "(an alias naming a known company, or a company named by another's alias)") from exc
        return replace(resolver, former_owners=former_owners, rejected=extra.rejected, inputs=extra.inputs)

    @classmethod
    def from_frames(
        cls, aliases: pl.DataFrame, acquisitions: pl.DataFrame, fuzzy_cutoff: float = 92.0,
        alliances: pl.DataFrame | None = None,
    ) -> CompanyResolver:
        """Build from an alias table (alias, canonical), an ACQUISITIONS and an optional ALLIANCES table."""
        alias_map = normalized_aliases(aliases)
        acq = schemas.conform(acquisitions, schemas.ACQUISITIONS).drop_nulls(["acquirer", "acquired", "close_date"])
        raw = [
            (a, b, d, source)
            for a0, b0, d, source in acq.select("acquirer", "acquired", "close_date", "source").iter_rows()
            if (a := normalize_company(a0)) and (b := normalize_company(b0))
        ]
        dated = [(a, b, d) for a, b, d, _ in raw]
        deals = tuple(sorted((Deal(a, b, d, _until(dated, a, b, d), source) for a, b, d, source in raw),
                             key=_deal_key))
        pacts: list[Alliance] = []
        if alliances is not None:
            table = schemas.conform(alliances, schemas.ALLIANCES).drop_nulls(["company_a", "company_b", "start_date"])
            for a0, b0, start, end, source in table.select("company_a", "company_b", "start_date", "end_date",
                                                           "source").iter_rows():
                # a party may be named as the contract names it: "Biosense Webster" is JOHNSON AND JOHNSON
                a, b = (alias_map.get(n, n) if (n := normalize_company(x)) else None for x in (a0, b0))
                if a and b and a != b:
                    pacts.append(Alliance(a, b, start, end, source))
        # one alliance recorded twice (shipped and corpus) is one, with the first table's source
        pacts = list(dict.fromkeys(pacts))
        return cls(MappingProxyType(alias_map), deals, fuzzy_cutoff,
                   alliances=tuple(sorted(pacts, key=lambda x: (x.start_date, x.company_a, x.company_b))))

    # ---- name resolution

    def resolve(self, raw: str | None) -> str | None:
        return self.resolve_detail(raw).company_id

    def resolve_detail(self, raw: str | None) -> Resolution:
        """normalise -> alias -> exact canonical -> fuzzy (canonical names only) -> itself."""
        norm = normalize_company(raw)
        if norm is None:
            return Resolution(raw, None, None, "unknown", None)
        candidates = _candidates(raw, norm)
        for cand in candidates:
            if cand in self.aliases:
                return Resolution(raw, norm, self.aliases[cand], "alias", 100.0)
            if cand in self.canonical:
                return Resolution(raw, norm, cand, "exact", 100.0)
        hit = self._fuzzy(norm)
        if hit is not None:
            return Resolution(raw, norm, hit[0], "fuzzy", hit[1])
        # An unknown name is its own company; a parenthesised remark ("(Ibi)") is not part of it.
        return Resolution(raw, norm, candidates[-1], "unknown", None)

    def assignee_companies(self, raw: str | None, known: Iterable[str] = ()) -> tuple[str, ...]:
        """Company ids of one patent's assignee field, in order, without repeats.

        Several assignees come joined by '; ' or '|' (PATENTS contract), or run together into one
        string as the benchmark stores them ("NOVOSTE EMORY UNIVERSITY", "SORIN CRM SAS INSERM ...").
        A name that does not resolve to a known company is split at a word boundary where a known
        company (shipped tables, or `known` ids of two words or more) begins or ends and the rest is
        another known company or an institution's name. The whole string stays one of the ids, so
        an unknown name still equals only itself; a name resolving to nothing yields nothing.
        """
        extra = frozenset(k for k in known if isinstance(k, str) and len(k.split()) >= 2)
        out: list[str] = []
        for part in split_assignees(raw):
            detail = self.resolve_detail(part)
            if detail.company_id is None:
                continue
            ids = [detail.company_id]
            if detail.method == "unknown" and detail.company_id not in extra:
                ids += self._segment(detail.company_id.split(), extra)
            out += [i for i in ids if i not in out]
        return tuple(out)

    def _known_id(self, tokens: list[str], extra: frozenset[str]) -> str | None:
        """The company id of a word run if it is a known name (alias, canonical id or `extra`)."""
        norm: str | None = " ".join(tokens)  # tokens of a normalised name: only a legal form or THE may remain
        if tokens[-1] in LEGAL_TAIL or tokens[0] == "THE" or tuple(tokens[-2:]) in LEGAL_TAIL_PAIRS:
            norm = normalize_company(norm)
        if norm is None:
            return None
        if norm in self.aliases:
            return self.aliases[norm]
        return norm if norm in self.canonical or norm in extra else None

    def _segment(self, tokens: list[str], extra: frozenset[str]) -> list[str]:
        """Split run-together names: the longest known head, else the longest known tail."""
        def rest_id(rest: list[str]) -> str | None:
            if len(rest) >= 2 and _INSTITUTION.intersection(rest):
                return normalize_company(" ".join(rest))
            return None

        for cut in range(len(tokens) - 1, 0, -1):
            if "AND" in (tokens[cut - 1], tokens[cut]):
                continue
            head, rest = self._known_id(tokens[:cut], extra), tokens[cut:]
            if head is None:
                continue
            tail = self._known_id(rest, extra) or rest_id(rest)
            if tail is not None:
                return [head, tail]
            deeper = self._segment(rest, extra)
            if deeper:
                return [head, *deeper]
        for cut in range(1, len(tokens)):
            if "AND" in (tokens[cut - 1], tokens[cut]):
                continue
            tail = self._known_id(tokens[cut:], extra)
            head = rest_id(tokens[:cut]) if tail is not None else None
            if head is not None and tail is not None:
                return [head, tail]
        return []

    def _fuzzy(self, norm: str) -> tuple[str, float] | None:
        """Best canonical name at or above the cut-off; a tie between two companies is no match."""
        if len(norm) < self.fuzzy_min_length or not self._choices:
            return None
        hits = process.extract(
            norm, self._choices, scorer=fuzz.token_sort_ratio, score_cutoff=self.fuzzy_cutoff, limit=2
        )
        if not hits or (len(hits) == 2 and hits[1][1] == hits[0][1]):
            return None
        best, score = hits[0][0], float(hits[0][1])
        # Typos keep the first letter; "LINVATEC" vs "INVATEC" or "P TECH" vs "EP TECH" are other firms.
        if best[0] != norm[0] or abs(len(best.split()) - len(norm.split())) > 1:
            return None
        return best, score

    # ---- M&A relation

    def company_relation(
        self, device_company: str | None, device_date: date | None, patent_company: str | None,
        patent_granted: date | int | None = None, device_last_decision: date | None = None,
    ) -> CompanyMatch | None:
        """How a patent's company relates to a device's company while the device was on the market:
        from its approval date to its latest FDA decision (`device_last_decision`, else the approval).

        `patent_granted` (a date or a year) is needed only by a former owner's patent window.
        """
        dev, pat = self.resolve(device_company), self.resolve(patent_company)
        if dev is None or pat is None:
            return None
        for reach in self.reach(dev):
            if (reach.target == pat and reach.holds(device_date, device_last_decision)
                    and reach.covers(patent_granted)):
                return CompanyMatch(reach.kind, reach.path)
        return None

    def reach(self, company_id: str) -> tuple[Reach, ...]:
        """Every company `company_id` reaches, best first (same, acquired, acquirer; shortest path)."""
        known = self._reach.get(company_id)
        return known if known is not None else (Reach(company_id, "same", company_id, None, None, 0),)


def _enumerate(
    start: str, down: Mapping[str, list[Deal]], up: Mapping[str, list[Deal]], former_owners: bool = False,
    partners: Iterable[tuple[str, Alliance]] = (),
) -> tuple[Reach, ...]:
    found = [Reach(start, "same", start, None, None, 0)]
    found += _walk(start, down, "acquired", (start,), start, None, None, up if former_owners else None)
    found += _walk(start, up, "acquirer", (start,), start, None, None)
    for partner, pact in partners:
        span = pact.start_date.isoformat() + (f" to {pact.end_date.isoformat()}" if pact.end_date else "")
        found.append(Reach(partner, "partner", f"{start} ~ {partner} (alliance {span})",
                           pact.start_date, pact.end_date, 1))
    return tuple(sorted(found, key=lambda r: (KIND_RANK[r.kind], r.steps, r.path)))


def _walk(
    node: str,
    edges: Mapping[str, list[Deal]],
    kind: MatchKind,
    seen: tuple[str, ...],
    path: str,
    valid_from: date | None,
    valid_until: date | None,
    former: Mapping[str, list[Deal]] | None = None,
) -> Iterator[Reach]:
    """All simple paths from `node` along `edges`; 'acquired' paths keep only device dates they allow.

    With `former` (the acquired -> acquirer edges), every 'acquired' step is also extended by one
    step up to an earlier owner of the company just reached, whose ownership ended no later than
    this step's close (a divestiture before the sale): a "former_owner" reach, same device dates,
    for the owner's patents granted while it held the company (its patents from other years
    belong to its other lines).
    """
    for deal in edges.get(node, []):
        nxt = deal.acquired if kind == "acquired" else deal.acquirer
        if nxt in seen:
            continue
        arrow = "<-" if kind == "acquired" else "->"
        step_path = f"{path} {arrow} {nxt} ({deal.close_date.isoformat()})"
        lo, hi = valid_from, valid_until
        if kind == "acquired":
            lo = max(lo, deal.close_date) if lo else deal.close_date
            hi = min(hi, deal.until) if hi and deal.until else (hi or deal.until)
            if hi is not None and hi <= lo:
                continue
        yield Reach(nxt, kind, step_path, lo, hi, len(seen))
        if former is not None:
            for earlier in former.get(nxt, []):
                owner = earlier.acquirer
                if (owner in seen or owner == nxt or earlier.until is None
                        or earlier.close_date >= deal.close_date or earlier.until > deal.close_date):
                    continue
                yield Reach(owner, "former_owner", f"{step_path} -> {owner} ({earlier.close_date.isoformat()})",
                            lo, hi, len(seen) + 1, patent_from=earlier.close_date, patent_until=earlier.until)
        yield from _walk(nxt, edges, kind, (*seen, nxt), step_path, lo, hi, former)


def _candidates(raw: str | None, norm: str) -> list[str]:
    """The full name, then the name without parenthesised remarks ("(Philips)", "(Ibi)")."""
    out = [norm]
    if isinstance(raw, str) and "(" in raw:
        bare = normalize_company(_PARENS.sub(" ", raw))
        if bare and bare != norm:
            out.append(bare)
    return out


def _until(deals: list[tuple[str, str, date]], acquirer: str, acquired: str, closed: date) -> date | None:
    """The next time a different buyer took the same company over (a divestiture ends ownership)."""
    later = [d for a, b, d in deals if b == acquired and a != acquirer and d > closed]
    return min(later) if later else None


def _deal_key(deal: Deal) -> tuple[date, str, str]:
    return deal.close_date, deal.acquirer, deal.acquired


@cache
def _default_resolver(fuzzy_cutoff: float) -> CompanyResolver:
    return CompanyResolver.from_frames(aliases_frame(), acquisitions_frame(), fuzzy_cutoff, alliances_frame())


def company_relation(
    device_company: str | None,
    device_date: date | None,
    patent_company: str | None,
    resolver: CompanyResolver | None = None,
) -> CompanyMatch | None:
    """`CompanyResolver.company_relation` with the shipped tables unless a resolver is given."""
    return (resolver or CompanyResolver.default()).company_relation(device_company, device_date, patent_company)
