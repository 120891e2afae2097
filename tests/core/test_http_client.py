"""The shared source client against a real local server: retries, Retry-After, auth, truncation."""

from urllib.parse import quote, quote_plus

import pytest
from pydantic import SecretStr

from meddevkg_core.http_client import JsonClient, RetryPolicy, SourceAuthError, SourceError, parse_retry_after

FAST = RetryPolicy(timeout=0.5, max_retries=5, backoff_base=0.0, backoff_max=0.0)


def _client(**kw) -> JsonClient:
    return JsonClient("test source", kw.pop("policy", FAST), **kw)


def test_faults_are_retried_until_the_real_answer(fake_source):
    fake_source.route("/items.json", lambda path, q, h, b: (200, {"results": [{"id": q["id"][0]}]}))
    fake_source.inject("/items", 429, 500, "timeout", "truncated", "reset")
    with _client() as client:
        assert client.get_json(fake_source.url + "/items.json", {"id": "7"}) == {"results": [{"id": "7"}]}
        assert client.stats.requests == 6 and client.stats.retries == 5


def test_retries_run_out_with_a_clear_error(fake_source):
    fake_source.route("/items.json", lambda *a: (200, {}))
    fake_source.inject("/items", *([503] * 3))
    with _client(policy=FAST.model_copy(update={"max_retries": 2})) as client, pytest.raises(SourceError) as err:
        client.get_json(fake_source.url + "/items.json")
    assert "3 attempt(s)" in str(err.value) and "503" in str(err.value)


def test_auth_failure_names_the_variable_and_never_the_key(fake_source):
    fake_source.route("/items.json", lambda path, q, h, b: (403, {"error": f"bad key {q['api_key'][0]}"}))
    with _client(secret=SecretStr("s3cr3t"), secret_env="MEDDEVKG_OPENFDA_API_KEY") as client:
        with pytest.raises(SourceAuthError) as err:
            client.get_json(fake_source.url + "/items.json", {"api_key": "s3cr3t"})
    assert "MEDDEVKG_OPENFDA_API_KEY" in str(err.value) and "s3cr3t" not in str(err.value)
    assert "s3cr3t" not in repr(client)


def test_other_client_errors_are_not_retried_and_404_can_mean_empty(fake_source):
    fake_source.route("/bad.json", lambda *a: (400, {"error": "bad query"}))
    with _client() as client:
        with pytest.raises(SourceError) as err:
            client.get_json(fake_source.url + "/bad.json")
        assert err.value.status == 400 and client.stats.requests == 1
        assert client.get_json(fake_source.url + "/missing.json", not_found_ok=True) is None


def test_retry_after_forms():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: 1445412480.0) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_a_key_stays_out_of_messages_as_the_url_encodes_it_and_when_an_echo_is_cut(fake_source):
    key = "k3y+with/sl=sh and&more"  # each of + / = space & is encoded in a query string
    echo = "x" * 168 + " your key: "  # the key straddles the 200 characters a message keeps of a body
    fake_source.route("/items.json", lambda path, q, h, b: (400, {"error": echo + q["api_key"][0]}))
    with _client(secret=SecretStr(key)) as client, pytest.raises(SourceError) as err:
        client.get_json(fake_source.url + "/items.json", {"api_key": key})
    message = str(err.value)
    assert err.value.status == 400 and "api_key=***" in message  # the URL's encoded key, replaced
    for piece in (key[:8], quote(key, safe="")[:8], quote_plus(key)[:8], "and%26more", "and&more"):
        assert piece not in message, piece


def test_a_post_that_expects_no_json_takes_a_plain_reply_and_is_sent_once(fake_source):
    fake_source.route("/hook", lambda *a: (200, b"ok"))  # a chat webhook's answer
    with _client() as client:
        assert client.post_json(fake_source.url + "/hook", {"text": "hi"}, json_reply=False) is None
        assert client.stats.requests == 1


def test_an_answer_nested_too_deeply_to_decode_is_a_source_error_without_retries(fake_source):
    fake_source.route("/items.json", lambda *a: (200, b"[" * 100_000 + b"]" * 100_000))
    with _client() as client, pytest.raises(SourceError, match="nested too deeply") as err:
        client.get_json(fake_source.url + "/items.json")
    assert err.value.attempts == 1 and client.stats.requests == 1
