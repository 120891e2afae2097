"""The optional LLM extractor, against a local fake OpenAI-compatible server (never a real one).

The server is a real ThreadingHTTPServer on 127.0.0.1; every sleep of the client is injected, so
retries and rate limits cost no wall-clock time.
"""

import json
import logging
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
import pytest

from meddevkg_core import schemas
from meddevkg_core.errors import InputError
from meddevkg_core.llm_client import (
    API_KEY_ENV,
    ChatClient,
    LLMAuthError,
    LLMConfig,
    RateLimiter,
    parse_retry_after,
)
from meddevkg_core.llm_extraction import (
    EntityExtractor,
    ExtractorSettings,
    LLMEntityExtractor,
    LLMUnavailableError,
    ReplyError,
    ResponseCache,
    SpacyEntityExtractor,
    cache_key,
    load_prompt,
    parse_reply,
)
from meddevkg_core.ontology import load_meddevonto

KEY = "sk-test-SECRET-1234"
DEVICE_TEXT = ("The XIENCE drug-eluting stent is delivered by a Rapid Exchange Catheter during "
               "percutaneous coronary intervention (PCI) to treat coronary artery disease.")
OTHER_TEXT = "A balloon catheter for angioplasty."


def entity(span, type_="LINK_COMPONENT", name=None):
    return {"span": span, "type": type_, "standardized_name": name or span.title()}


DEVICE_REPLY = json.dumps({"entities": [
    entity("drug eluting stent", name="Drug-Eluting Stent"),  # the text has a hyphen: fuzzy grounding
    entity("rapid exchange catheter", name="Catheter"),  # case-insensitive grounding
    entity("percutaneous coronary intervention (PCI)", "LINK_MECHANISM", "Percutaneous Coronary Intervention"),
    entity("bioresorbable vascular scaffold", name="Bioresorbable Scaffold"),  # hallucinated
    entity("stent", name="Drug-Eluting Stent"),  # same norm again: one mention per (doc, norm)
    entity("delivered", "LINK_MECHANISM", "Delivery System"),  # forbidden name
    {"span": "coronary artery disease", "type": "LINK_DISEASE", "standardized_name": "CAD"},  # bad type
    {"span": "XIENCE", "type": "LINK_COMPONENT", "standardized_name": "Xience", "confidence": 0.9},
]})
OTHER_REPLY = json.dumps({"entities": [entity("balloon catheter", name="Balloon Catheter"),
                                       entity("angioplasty", "LINK_MECHANISM")]})


def completion(content):
    return json.dumps({"id": "x", "object": "chat.completion",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})


class FakeLLM:
    """Answers by looking for a marker in the user message; `script` responses are served first."""

    def __init__(self):
        self.requests = []
        self.script = []  # (status, headers, body) served in order before canned replies
        self.replies = {"XIENCE": DEVICE_REPLY, "balloon catheter": OTHER_REPLY}
        self.delay = []  # seconds to stall the next requests (for client timeouts)
        self.lock = threading.Lock()

    def respond(self, path, headers, body):
        with self.lock:
            self.requests.append({"path": path, "headers": headers, "body": body})
            if path != "/v1/chat/completions":
                return 404, {}, '{"error": "not found"}', 0
            delay = self.delay.pop(0) if self.delay else 0
            if self.script:
                return (*self.script.pop(0), delay)
        user = body["messages"][-1]["content"]
        content = next((c for marker, c in self.replies.items() if marker in user), '{"entities": []}')
        return 200, {}, completion(content), delay


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake():
    state = FakeLLM()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, headers, body, delay = state.respond(self.path, dict(self.headers), json.loads(raw or b"{}"))
            if delay:
                threading.Event().wait(delay)
            try:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                data = body.encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (timeout test)
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def onto():
    return load_meddevonto()


def config(fake, tmp_path, **kw):
    values = dict(base_url=fake.base_url, model="fake-model", api_key=KEY, timeout=2.0, max_retries=3,
                  requests_per_minute=None, cache_dir=tmp_path / "llm-cache")
    return LLMConfig(**{**values, **kw})


def extractor(cfg, domain="device", sleeps=None):
    sleep = sleeps.append if sleeps is not None else (lambda s: None)
    return LLMEntityExtractor(cfg, domain, client=ChatClient(cfg, sleep=sleep, rng=random.Random(0)))


def docs(*pairs):
    return pl.DataFrame({"doc_id": [d for d, _ in pairs], "text": [t for _, t in pairs]})


def reasons(result):
    return result.rejected["reason"].to_list()


# ------------------------------------------------------------------ happy path and grounding


def test_mentions_are_grounded_mapped_and_in_the_spacy_schema(fake, tmp_path, onto):
    ext = extractor(config(fake, tmp_path))
    result = ext.extract_mentions(docs(("P1", DEVICE_TEXT)), onto)
    assert result.mentions.schema == schemas.MENTIONS
    assert result.rejected.schema == schemas.REJECTED_RECORDS
    rows = {r["norm"]: r for r in result.mentions.iter_rows(named=True)}
    assert set(rows) == {"drug eluting stent", "catheter", "percutaneous coronary intervention", "xience"}

    des = rows["drug eluting stent"]  # fuzzy, at its first offset, with the text's own wording
    assert (des["grounding"], des["mention"], des["concept_id"], des["entity_type"]) == (
        "fuzzy", "drug-eluting stent", "MDO:0018", "COMPONENT")
    assert DEVICE_TEXT[des["start"]:des["end"]] == des["mention"]
    cat = rows["catheter"]
    assert (cat["grounding"], cat["mention"], cat["concept_id"], cat["map_tier"]) == (
        "case_insensitive", "Rapid Exchange Catheter", "C0085590", "exact")
    pci = rows["percutaneous coronary intervention"]
    assert (pci["grounding"], pci["entity_type"], pci["concept_id"]) == ("exact", "MECHANISM", "C1532338")
    assert rows["xience"]["concept_id"] is None and rows["xience"]["map_tier"] == "none"

    got = reasons(result)
    assert "span not found in text" in got  # the hallucinated scaffold is rejected, and kept
    assert any(r.startswith("rule violation: forbidden name 'Delivery System'") for r in got)
    assert any(r.startswith("schema violation: type") for r in got)
    assert len(got) == 3 and set(result.rejected["record_key"]) == {"P1"}
    hallucinated = json.loads(result.rejected.filter(pl.col("reason") == "span not found in text")["record"][0])
    assert hallucinated["entity"]["span"] == "bioresorbable vascular scaffold"
    assert (ext.stats.entities, ext.stats.rejected_entities, ext.stats.requests) == (8, 3, 1)


def test_request_is_an_openai_chat_completion_with_the_versioned_prompt(fake, tmp_path, onto):
    extractor(config(fake, tmp_path), "patent").extract_mentions(docs(("US1", OTHER_TEXT)), onto)
    (req,) = fake.requests
    body = req["body"]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    assert (body["model"], body["temperature"]) == ("fake-model", 0.0)
    assert body["response_format"] == {"type": "json_object"}
    system, user = body["messages"]
    assert system["role"] == "system" and "Patent Decoder" in system["content"]
    assert "LINK_COMPONENT" in system["content"] and "{text}" not in user["content"]
    assert OTHER_TEXT in user["content"]


def test_prompts_are_versioned_per_domain():
    device, patent = load_prompt("device"), load_prompt("patent")
    assert (device.id, patent.id) == ("device_entities_v1", "patent_entities_v1")
    assert "Precision Extractor" in device.system and "Information Not Available" in device.system
    assert "Expandable prosthesis".lower() in patent.system.lower() and device.sha256 != patent.sha256
    with pytest.raises(FileNotFoundError):
        load_prompt("device", "v999")


def test_both_extractors_share_one_interface(fake, tmp_path):
    assert isinstance(extractor(config(fake, tmp_path)), EntityExtractor)
    assert isinstance(SpacyEntityExtractor(nlp=None), EntityExtractor)


def test_the_llm_extractor_reports_its_documents_as_it_goes(fake, tmp_path, onto):
    # `run` prints Stage 1's progress: one LLM request per document is the slowest stage there
    seen = []
    extractor(config(fake, tmp_path)).extract_mentions(docs(("P1", DEVICE_TEXT), ("P2", ""), ("P3", OTHER_TEXT)),
                                                       onto, lambda done, total: seen.append((done, total)))
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]


# ------------------------------------------------------------------ retries, errors, failures


def test_429_is_retried_after_the_retry_after_header(fake, tmp_path):
    cfg = config(fake, tmp_path)
    fake.script = [(429, {"Retry-After": "7"}, '{"error": "slow down"}')]
    sleeps = []
    client = ChatClient(cfg, sleep=sleeps.append, rng=random.Random(0))
    assert json.loads(client.complete([{"role": "user", "content": "XIENCE"}]))["entities"]
    assert sleeps == [7.0] and len(fake.requests) == 2
    assert (client.stats.requests, client.stats.retries) == (2, 1)


def test_5xx_and_timeouts_are_retried_with_growing_jittered_backoff(fake, tmp_path):
    cfg = config(fake, tmp_path, timeout=0.25, backoff_base=1.0)
    fake.delay = [1.0]  # first attempt times out
    fake.script = [(200, {}, completion("{}")), (500, {}, "boom"), (503, {}, "busy")]
    sleeps = []
    client = ChatClient(cfg, sleep=sleeps.append, rng=random.Random(0))
    client.complete([{"role": "user", "content": "XIENCE"}])  # the stalled reply is discarded
    assert len(sleeps) == 3 and client.stats.retries == 3
    assert all(0 <= s <= 2**i for i, s in enumerate(sleeps))


def test_retry_after_http_date_and_garbage():
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: 1445412470.0) == pytest.approx(10.0)
    assert parse_retry_after("3.5") == 3.5
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_names_the_env_var_and_hides_the_key(fake, tmp_path, onto, status):
    cfg = config(fake, tmp_path)
    fake.script = [(status, {}, json.dumps({"error": f"Incorrect API key provided: {KEY}"}))]
    with pytest.raises(LLMAuthError) as info:
        extractor(cfg).extract_mentions(docs(("P1", DEVICE_TEXT)), onto)
    assert API_KEY_ENV in str(info.value) and KEY not in str(info.value)
    assert len(fake.requests) == 1  # never retried
    assert KEY not in repr(cfg) and KEY not in str(cfg) and KEY not in cfg.model_dump_json()


def test_a_key_from_a_file_loses_its_newline_and_never_reaches_a_debug_log(fake, tmp_path, onto, caplog):
    cfg = LLMConfig.from_env({"MEDDEVKG_LLM_BASE_URL": fake.base_url, "MEDDEVKG_LLM_MODEL": "fake-model",
                              "MEDDEVKG_LLM_API_KEY": KEY + "\n"}, requests_per_minute=None, max_retries=0)
    caplog.set_level(logging.DEBUG)
    result = extractor(cfg).extract_mentions(docs(("P1", DEVICE_TEXT)), onto)
    assert result.mentions.height and not [r for r in reasons(result) if r.startswith("llm request failed")]
    assert fake.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in caplog.text


def test_exhausted_retries_record_a_failure_and_the_run_goes_on(fake, tmp_path, onto):
    cfg = config(fake, tmp_path, max_retries=2)
    fake.script = [(500, {}, f"internal error for {KEY}")] * 3
    result = extractor(cfg).extract_mentions(docs(("P1", DEVICE_TEXT), ("P2", OTHER_TEXT)), onto)
    (failure,) = result.rejected.filter(pl.col("record_key") == "P1").rows(named=True)
    assert failure["reason"].startswith("llm request failed: http://127.0.0.1:")
    assert "no success after 3 attempt(s), last HTTP 500" in failure["reason"]
    assert KEY not in failure["reason"]
    assert set(result.mentions["doc_id"]) == {"P2"} and len(fake.requests) == 4


def test_a_dead_endpoint_stops_the_run(fake, tmp_path, onto):
    cfg = config(fake, tmp_path, max_retries=0, max_consecutive_failures=2)
    fake.script = [(502, {}, "bad gateway")] * 5
    with pytest.raises(LLMUnavailableError, match="2 documents in a row"):
        extractor(cfg).extract_mentions(docs(("P1", "a stent"), ("P2", "a valve"), ("P3", "a lead")), onto)
    assert len(fake.requests) == 2


def test_an_endpoint_no_document_reaches_stops_the_run_before_the_failure_limit(fake, tmp_path, onto):
    # One device partition is one document: a dead endpoint would never reach max_consecutive_failures,
    # and the step would store no mentions as if the device had none.
    cfg = config(fake, tmp_path, max_retries=0)
    fake.script = [(502, {}, "bad gateway"), (404, {}, "no such model")]
    with pytest.raises(LLMUnavailableError, match=r"no reply to any of the 2 document\(s\) sent; last: .*HTTP 404"):
        extractor(cfg).extract_mentions(docs(("P1", "a stent"), ("P2", "a valve")), onto)
    fake.script = [(502, {}, "bad gateway")]  # one answered document: the run goes on, the failure is kept
    result = extractor(cfg).extract_mentions(docs(("P1", "a stent"), ("P2", OTHER_TEXT)), onto)
    assert reasons(result)[0].startswith("llm request failed") and set(result.mentions["doc_id"]) == {"P2"}


def test_malformed_replies_are_recorded_failures_and_not_cached(fake, tmp_path, onto):
    cfg = config(fake, tmp_path)
    fake.replies["XIENCE"] = '{"entities": [{"span": "stent", '  # truncated JSON
    fake.script = [(200, {}, '{"error": "upstream gateway"}')]  # P0: JSON, but not a chat completion
    frame = docs(("P0", "a stent"), ("P1", DEVICE_TEXT), ("P2", OTHER_TEXT), ("P3", None))
    ext = extractor(cfg)
    result = ext.extract_mentions(frame, onto)
    by_doc = dict(zip(result.rejected["record_key"], result.rejected["reason"], strict=True))
    assert by_doc["P0"].startswith("llm request failed:") and "reply is not a chat completion" in by_doc["P0"]
    assert by_doc["P1"].startswith("llm reply invalid: reply is not JSON")
    assert by_doc["P3"] == "missing text"
    assert set(result.mentions["doc_id"]) == {"P2"} and ext.stats.failed_documents == 2
    assert len(ResponseCache(cfg.cache_dir)) == 1  # only P2's usable reply
    fake.requests.clear()
    extractor(cfg).extract_mentions(frame, onto)
    assert len(fake.requests) == 2  # the two failures are asked again, P2 comes from the cache


def test_an_entity_with_a_lone_surrogate_is_rejected_on_its_own(fake, tmp_path, onto):
    # json.dumps writes the surrogate as a "\ud800" escape, which parse_reply's json.loads turns back
    fake.replies["XIENCE"] = json.dumps({"entities": [entity("drug eluting stent", name="Drug-Eluting Stent"),
                                                      entity("stent\ud800"), entity("catheter", name="Cath\udcff")]})
    result = extractor(config(fake, tmp_path)).extract_mentions(docs(("P1", DEVICE_TEXT)), onto)
    assert result.mentions["norm"].to_list() == ["drug eluting stent"]
    assert [r.split(": ")[1] for r in reasons(result)] == ["span", "standardized_name"]
    assert all("unable to parse raw data as a unicode string" in r for r in reasons(result))
    assert "\\ud800" in result.rejected["record"][0]
    result.rejected.write_parquet(tmp_path / "rejected.parquet")


def test_a_reply_text_with_a_lone_surrogate_is_a_failed_request_and_not_cached(fake, tmp_path, onto):
    # the chat completion's own JSON carries the "\ud800" escape: the reply text is no valid Unicode
    fake.replies["XIENCE"] = json.dumps({"entities": [entity("stent")]}).replace("stent", "stent\ud800")
    cfg = config(fake, tmp_path)
    result = extractor(cfg).extract_mentions(docs(("P1", DEVICE_TEXT), ("P2", OTHER_TEXT)), onto)
    by_doc = dict(zip(result.rejected["record_key"], result.rejected["reason"], strict=True))
    assert by_doc["P1"].startswith("llm request failed:") and "not valid Unicode" in by_doc["P1"]
    assert set(result.mentions["doc_id"]) == {"P2"} and len(ResponseCache(cfg.cache_dir)) == 1


def test_a_non_json_reply_is_transient_and_retried(fake, tmp_path, onto):
    cfg = config(fake, tmp_path)
    fake.script = [(200, {}, "<html>gateway</html>")]  # a proxy page instead of the API's answer
    result = extractor(cfg).extract_mentions(docs(("P2", OTHER_TEXT)), onto)
    assert set(result.mentions["doc_id"]) == {"P2"} and len(fake.requests) == 2


def test_parse_reply_tolerates_a_code_fence_but_needs_an_entity_list():
    valid, invalid = parse_reply('```json\n{"entities": [{"span": "stent", "type": "LINK_COMPONENT", '
                                 '"standardized_name": "Stent"}, {"span": "x"}]}\n```')
    assert [e.span for e in valid] == ["stent"] and len(invalid) == 1
    for bad in ('["stent"]', '{"items": []}', "Sure! Here are the entities", '{"entities": ' + "[" * 5000):
        with pytest.raises(ReplyError):
            parse_reply(bad)


# ------------------------------------------------------------------ cache and rate limit


def test_a_rerun_is_served_from_the_cache_with_zero_requests(fake, tmp_path, onto):
    cfg = config(fake, tmp_path)
    frame = docs(("P1", DEVICE_TEXT), ("P2", OTHER_TEXT), ("P2-copy", OTHER_TEXT))
    first = extractor(cfg).extract_mentions(frame, onto)
    assert len(fake.requests) == 2  # the duplicate text is sent once
    fake.requests.clear()
    again = extractor(cfg)
    second = again.extract_mentions(frame, onto)
    assert fake.requests == [] and again.stats.cache_hits == 3
    assert second.mentions.equals(first.mentions) and second.rejected.equals(first.rejected)
    extractor(config(fake, tmp_path, model="other-model")).extract_mentions(frame.head(1), onto)
    assert len(fake.requests) == 1  # another model is another key
    extractor(cfg, "patent").extract_mentions(frame.head(1), onto)
    assert len(fake.requests) == 2  # so is another prompt


def test_a_damaged_cache_entry_is_a_miss_and_asked_again(fake, tmp_path, onto):
    cfg = config(fake, tmp_path)
    key = cache_key(load_prompt("device"), cfg.model, OTHER_TEXT)
    cache = ResponseCache(cfg.cache_dir)
    for damaged in ('{"content": 5}', '{"content": ["a"]}', "[" * 100_000, '{"prompt": "x"}'):
        cache._path(key).parent.mkdir(parents=True, exist_ok=True)
        cache._path(key).write_text(damaged, encoding="utf-8")
        fake.requests.clear()
        result = extractor(cfg).extract_mentions(docs(("P2", OTHER_TEXT)), onto)
        assert set(result.mentions["doc_id"]) == {"P2"} and len(fake.requests) == 1, damaged


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_rate_limiter_spaces_requests_on_a_fake_clock():
    clock = FakeClock()
    limiter = RateLimiter(30, clock=clock, sleep=clock.sleep)  # one request per 2 s
    for _ in range(3):
        limiter.acquire()
    assert clock.sleeps == [2.0, 2.0]
    clock.now += 10
    assert limiter.acquire() == 0.0 and clock.sleeps == [2.0, 2.0]
    clock.now += 0.5
    assert limiter.acquire() == pytest.approx(1.5)
    assert RateLimiter(None, clock=clock, sleep=clock.sleep).acquire() == 0.0


class RecordingLimiter(RateLimiter):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.sent = []

    def acquire(self):
        waited = super().acquire()
        self.sent.append(self._clock())
        return waited


def test_client_waits_for_the_limiter_before_every_attempt(fake, tmp_path):
    clock = FakeClock()
    cfg = config(fake, tmp_path, requests_per_minute=120, backoff_base=0.1)
    fake.script = [(429, {"Retry-After": "0"}, "{}")]
    limiter = RecordingLimiter(cfg.requests_per_minute, clock=clock, sleep=clock.sleep)
    client = ChatClient(cfg, sleep=clock.sleep, rng=random.Random(1), limiter=limiter)
    for _ in range(3):
        client.complete([{"role": "user", "content": "x"}])
    assert len(fake.requests) == len(limiter.sent) == 4  # retries are paced too
    gaps = [b - a for a, b in zip(limiter.sent, limiter.sent[1:], strict=False)]
    assert all(g >= 0.5 - 1e-9 for g in gaps) and gaps[1:] == [0.5, 0.5]


def test_config_from_env_names_missing_variables(tmp_path):
    env = {"MEDDEVKG_LLM_BASE_URL": "http://127.0.0.1:9/v1", "MEDDEVKG_LLM_MODEL": "m",
           "MEDDEVKG_LLM_API_KEY": KEY, "MEDDEVKG_LLM_CACHE_DIR": str(tmp_path),
           "MEDDEVKG_LLM_REQUESTS_PER_MINUTE": "30"}
    cfg = LLMConfig.from_env(env)
    assert (cfg.model, cfg.api_key.get_secret_value(), cfg.cache_dir, cfg.requests_per_minute) == (
        "m", KEY, tmp_path, 30.0)
    assert LLMConfig.from_env(env, model="n").model == "n"
    with pytest.raises(ValueError, match="MEDDEVKG_LLM_MODEL"):
        LLMConfig.from_env({"MEDDEVKG_LLM_BASE_URL": "http://x"})


def test_a_reply_echoing_the_key_never_puts_it_in_a_recorded_reason(fake, tmp_path, onto):
    cfg = config(fake, tmp_path)
    not_text = {"choices": [{"message": {"content": {"echo": f"your key {KEY}"}}}]}  # content is not a string
    not_completion = {"error": "x" * 270 + f" your key {KEY}"}  # the key straddles the 300 characters kept
    fake.script = [(200, {}, json.dumps(not_text)), (200, {}, json.dumps(not_completion))]
    result = extractor(cfg).extract_mentions(docs(("P0", "a stent"), ("P1", "a valve")), onto)
    reasons = result.rejected["reason"].to_list()
    assert len(reasons) == 2 and "no text content" in reasons[0] and "not a chat completion" in reasons[1]
    assert not any(KEY[:6] in reason for reason in reasons), reasons


# ------------------------------------------------------------------ the choice of extractor


def test_the_extractor_settings_are_read_once_for_every_path(fake, tmp_path, monkeypatch, onto):
    # the Dagster resource built the LLM extractor from MEDDEVKG_LLM_* itself: `meddevkg run` had no way to
    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path))
    spacy = ExtractorSettings.read("spacy", {"MEDDEVKG_LLM_TIMEOUT": "soon"})  # not read for spaCy
    assert (spacy.extractor, spacy.llm) == ("spacy", None)
    assert isinstance(spacy.extractor_for("patent"), SpacyEntityExtractor)
    assert spacy.extractor_for("device").figures() == {"extractor": "spacy"}
    settings = ExtractorSettings.read("llm", {"MEDDEVKG_LLM_BASE_URL": fake.base_url, "MEDDEVKG_LLM_MODEL": "m",
                                              "MEDDEVKG_LLM_API_KEY": KEY, "MEDDEVKG_LLM_TIMEOUT": "",
                                              "MEDDEVKG_LLM_MAX_RETRIES": "0", "PATH": "/bin"})
    assert settings.llm is not None and settings.llm.cache_dir == tmp_path / "llm_cache"
    assert settings.llm.timeout == 60.0 and settings.llm.max_retries == 0  # empty is unset
    assert KEY not in repr(settings) and KEY not in settings.model_dump_json()
    extractors = settings.extractors()
    assert {d: e.prompt.id for d, e in extractors.items()} == {"device": "device_entities_v1",
                                                               "patent": "patent_entities_v1"}
    assert extractors["device"].figures()["llm_requests"] == 0
    extractors["device"].extract_mentions(docs(("P1", DEVICE_TEXT)), onto)
    extractors["device"].close()
    figures = extractors["device"].figures()
    assert (figures["extractor"], figures["llm_model"], figures["llm_requests"], figures["llm_http_attempts"]) == (
        "llm", "m", 1, 1)
    assert KEY not in json.dumps(figures)


@pytest.mark.parametrize(("extractor", "settings", "message"), [
    ("gpt", {}, "MEDDEVKG_ENTITY_EXTRACTOR='gpt': expected one of spacy, llm"),
    ("llm", {"MEDDEVKG_LLM_API_KEY": KEY},
     "LLM extraction needs MEDDEVKG_LLM_BASE_URL and MEDDEVKG_LLM_MODEL to be set"),
    ("llm", {"MEDDEVKG_LLM_BASE_URL": "http://x/v1", "MEDDEVKG_LLM_MODEL": "m", "MEDDEVKG_LLM_TIMEOUT": "soon"},
     "MEDDEVKG_LLM_TIMEOUT: Input should be a valid number, unable to parse string as a number")])
def test_a_wrong_extractor_setting_is_refused_in_one_line_naming_its_variable(extractor, settings, message):
    with pytest.raises(InputError) as refusal:
        ExtractorSettings.read(extractor, settings)
    assert str(refusal.value) == message
