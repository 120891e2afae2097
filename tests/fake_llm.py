"""A fake OpenAI-compatible chat endpoint on tests/fake_source_server.py, set up as MEDDEVKG_ENTITY_EXTRACTOR=llm
reaches it (the Dagster resource and `meddevkg run` alike): each reply names the TERMS found in the document,
plus one span that is in no document (HALLUCINATED)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_source_server import FakeSourceServer

KEY = "sk-test-SECRET-5678"
TERMS = ("stent", "balloon", "catheter", "electrode", "pacemaker")
HALLUCINATED = "bioresorbable vascular scaffold"
MODEL = "fake-model"


def chat(path, query, headers, body):
    """The terms of TERMS in the document, and one span that is not in it."""
    text = json.loads(body)["messages"][-1]["content"].lower()
    found = [{"span": t, "type": "LINK_COMPONENT", "standardized_name": t.title()} for t in TERMS if t in text]
    entities = [*found, {"span": HALLUCINATED, "type": "LINK_COMPONENT", "standardized_name": "Scaffold"}]
    content = json.dumps({"entities": entities})
    return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}


def serve_llm(server: FakeSourceServer, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> FakeSourceServer:
    """`server` answering chat completions, and MEDDEVKG_ENTITY_EXTRACTOR=llm with the MEDDEVKG_LLM_* settings
    pointing at it (no retries, no pacing: a failure shows at once)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    server.route("/v1/chat/completions", chat)
    for name, value in {"ENTITY_EXTRACTOR": "llm", "LLM_BASE_URL": server.url + "/v1", "LLM_MODEL": MODEL,
                        "LLM_API_KEY": KEY, "LLM_CACHE_DIR": str(cache_dir),
                        "LLM_REQUESTS_PER_MINUTE": "60000", "LLM_MAX_RETRIES": "0"}.items():
        monkeypatch.setenv("MEDDEVKG_" + name, value)
    return server
