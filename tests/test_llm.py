"""xmr.llm: the OpenAI-compatible client against a real scripted server on 127.0.0.1, the
response cache (several processes), a tiny random transformers chat model, the vLLM check."""

from __future__ import annotations

import json
import logging
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from chat_server import FIXED_ANSWERS, ChatServer
from tiny_llm import CONTEXT, save_tiny_chat_model

from xmr.llm import (
    STATUSES,
    CachedChat,
    ChatBackend,
    ChatRequest,
    ChatResult,
    HFChat,
    LLMSpec,
    OpenAIChat,
    ResponseCache,
    cache_key,
    create_chat,
)
from xmr.llm.openai_client import parse_completion
from xmr.llm.vllm import check_vllm, vllm_request_fields, vllm_result_row
from xmr.llm.vllm_processor import build_vllm_processor

KEY_ENV = "XMR_TEST_LLM_KEY"
KEY = "sk-test-0123456789-secret"


def ask(text: str, max_tokens: int = 16) -> ChatRequest:
    return ChatRequest(
        messages=(("system", "Answer briefly."), ("user", text)), max_tokens=max_tokens
    )


def script(name: str) -> ChatRequest:
    return ask(f"caption {name} [[script:{name}]]")


@pytest.fixture
def server():
    with ChatServer(slow_s=2.0, retry_after="1", expected_key=KEY) as running:
        yield running


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


def client(server: ChatServer, **settings: object) -> OpenAIChat:
    defaults = {"key_env": KEY_ENV, "timeout_s": 0.5, "max_retries": 2, "backoff_s": 0.02}
    return OpenAIChat(server.url, "scripted-model", **{**defaults, **settings})


# --- requests and results ------------------------------------------------------------------


def test_requests_have_one_canonical_json_and_results_keep_their_invariants() -> None:
    request = ChatRequest(messages=[["user", "ünïcode"]], max_tokens=4, temperature=0.5, seed=7)
    assert request.messages == (("user", "ünïcode"),)
    assert ChatRequest.from_json(request.to_json()) == request
    assert request.to_json() == ChatRequest((("user", "ünïcode"),), 4, 0.5, 7).to_json()
    assert "ünïcode" in request.to_json()
    for bad in ([], [()], [("robot", "hi")], [("user", 3)]):
        with pytest.raises(ValueError, match="message"):
            ChatRequest(messages=bad, max_tokens=4)
    with pytest.raises(ValueError, match="max_tokens"):
        ChatRequest(messages=(("user", "hi"),), max_tokens=0)
    with pytest.raises(ValueError, match="not valid JSON"):
        ChatRequest.from_json("{")
    with pytest.raises(ValueError, match="unknown chat status"):
        ChatResult("", "exploded")
    with pytest.raises(ValueError, match="carries no text"):
        ChatResult("partial", "timeout")
    assert ChatResult("fine", "ok").ok and "engine_error" in STATUSES


def test_a_request_may_name_its_image_without_changing_text_requests() -> None:
    plain = ChatRequest((("user", "A dog?"),), 8, 0.0, 3)
    assert plain.image is None and "image" not in json.loads(plain.to_json())
    # a text request's JSON, and so its cache key, is what it was before requests had images
    expected = '{"max_tokens":8,"messages":[["user","A dog?"]],"seed":3,"temperature":0.0}'
    assert plain.to_json() == expected
    pictured = ChatRequest((("user", "A dog?"),), 8, 0.0, 3, image="world/train/1.png")
    assert json.loads(pictured.to_json())["image"] == "world/train/1.png"
    assert ChatRequest.from_json(pictured.to_json()) == pictured
    assert cache_key("m", "x", pictured) != cache_key("m", "x", plain)
    for bad in ("", 3):
        with pytest.raises(ValueError, match="image must be"):
            ChatRequest((("user", "A dog?"),), 8, image=bad)
    with pytest.raises(ValueError, match="optional image"):
        ChatRequest.from_json(expected[:-1] + ',"picture":"a.png"}')


def test_completion_bodies_are_parsed_strictly() -> None:
    good = json.dumps({"choices": [{"message": {"content": "[1, 2]"}}]}).encode()
    assert parse_completion(good) == ("[1, 2]", "")
    refused = {
        b"[]": "not an object",
        b'{"choices": []}': "no choices",
        b'{"choices": [{"message": {"content": null}}]}': "not a string",
        b'{"error": {"message": "no", "code": "x"}, "choices": []}': "error body (code=x)",
        b"\xff\xfe": "not UTF-8",
        b"[" * 100_000: "nested too deeply",
        b"{'choices': 1}": "not JSON",
    }
    for body, reason in refused.items():
        text, problem = parse_completion(body)
        assert text is None and reason in problem, (body[:40], problem)


# --- the OpenAI-compatible client against the scripted server -----------------------------


def test_every_scripted_answer_ends_as_its_status(
    server: ChatServer,
    api_key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)  # where `touch PWNED` would land if anything ran it
    caplog.set_level(logging.DEBUG)
    expected = {  # script -> (status, attempts)
        "json_list": ("ok", 1),
        "malformed_json": ("ok", 1),  # the transport is fine; the caller's parser rejects it
        "csv_wrong_fields": ("ok", 1),
        "python_expression": ("ok", 1),
        "huge": ("too_large", 1),
        "rate_limit_once": ("ok", 2),
        "server_error": ("server_error", 3),  # max_retries=2: 1 + 2 attempts
        "slow": ("timeout", 3),
        "unauthorized": ("http_error", 1),  # 4xx: never retried
        "error_body": ("bad_response", 1),
        "bad_body": ("bad_response", 1),
    }
    chat = client(server)
    results = chat.complete([script(name) for name in expected] + [ask("plain")])
    chat.close()

    got = {name: (r.status, r.attempts) for name, r in zip(expected, results, strict=False)}
    assert got == expected
    by_name = dict(zip(expected, results, strict=False))
    for name, answer in FIXED_ANSWERS.items():
        assert by_name[name].text == answer  # returned verbatim, never evaluated
    assert not (tmp_path / "PWNED").exists()
    assert results[-1].text == "echo: plain"
    assert "after 3 attempts" in by_name["server_error"].error
    assert "$" + KEY_ENV in by_name["unauthorized"].error
    assert "code=bad_prompt" in by_name["error_body"].error

    log = server.log
    sent = {name: [e for e in log if f"[[script:{name}]]" in e.user_text] for name in expected}
    assert [e.status for e in sent["rate_limit_once"]] == [429, 200]
    first, second = sorted(sent["rate_limit_once"], key=lambda e: e.started)
    assert second.started - first.finished >= 0.95  # Retry-After: 1 honoured
    assert len(sent["server_error"]) == 3 and len(sent["unauthorized"]) == 1
    assert {e.authorization for e in log if e.script != "unauthorized"} == {f"Bearer {KEY}"}

    # The key (which the 401 body quotes) and the prompt never reach results, repr or logs.
    seen = " ".join([repr(chat), caplog.text] + [f"{r!r}" for r in results])
    assert KEY not in seen
    assert all("caption" not in r.error for r in results)


def test_answers_keep_request_order_and_in_flight_stays_bounded(
    api_key: str,
) -> None:
    with ChatServer(latency_s=0.1, expected_key=KEY) as server:
        chat = client(server, max_in_flight=3, timeout_s=5.0)
        texts = [f"row {i}" for i in range(18)]
        results = chat.complete([ask(text) for text in texts])
        again = chat.complete([ask("row 0")])  # the same object serves the next batch
        chat.close()
        chat.close()
    assert [r.text for r in results] == [f"echo: {text}" for text in texts]
    assert again[0].text == "echo: row 0"
    assert 1 < server.max_concurrent <= 3


def test_refused_connections_are_retried_then_reported(api_key: str) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    chat = OpenAIChat(
        f"http://127.0.0.1:{port}/v1", "m", key_env=KEY_ENV, max_retries=1, backoff_s=0.01
    )
    [result] = chat.complete([ask("hello")])
    chat.close()
    assert (result.status, result.attempts) == ("connection_error", 2)
    assert KEY not in result.error and "hello" not in result.error


def test_backoff_is_seeded_jittered_exponential_and_capped() -> None:
    chat = OpenAIChat("http://127.0.0.1:9/v1", "m", backoff_s=1.0, max_backoff_s=3.0, seed=5)
    waits = [chat._delay_s(attempt, None, random.Random("5/0")) for attempt in (1, 2, 3, 4)]
    assert 0.5 <= waits[0] < 1.0 and 1.0 <= waits[1] < 2.0 and 1.5 <= waits[3] < 3.0
    assert waits == [chat._delay_s(a, None, random.Random("5/0")) for a in (1, 2, 3, 4)]
    assert chat._delay_s(1, 3600.0, random.Random(0)) == 3.0  # Retry-After, capped
    assert chat._delay_s(1, 0.25, random.Random(0)) == 0.25


def test_bad_client_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="url must be"):
        OpenAIChat("ftp://host/v1", "m")
    with pytest.raises(ValueError, match="max_in_flight must be >= 1, got 0"):
        OpenAIChat("http://127.0.0.1:9/v1", "m", max_in_flight=0)
    monkeypatch.setenv(KEY_ENV, KEY + "\nInjected: header")
    chat = OpenAIChat("http://127.0.0.1:9/v1", "m", key_env=KEY_ENV)
    with pytest.raises(ValueError, match=f"\\${KEY_ENV} holds characters") as refused:
        chat.complete([ask("hi")])
    chat.close()
    assert KEY not in str(refused.value)


# --- the response cache --------------------------------------------------------------------


def test_a_repeated_batch_is_answered_from_the_cache(
    server: ChatServer, api_key: str, tmp_path: Path
) -> None:
    cache = ResponseCache(tmp_path / "cache")
    chat = CachedChat(client(server, max_retries=0), cache)
    assert isinstance(chat, ChatBackend) and chat.name == "openai"
    batch = [ask("one"), ask("two"), ask("one"), script("server_error")]
    first = chat.complete(batch)
    assert [r.status for r in first] == ["ok", "ok", "ok", "server_error"]
    assert len(server.log) == 3  # "one" asked once for both rows

    second = chat.complete(batch)
    chat.close()
    assert [r.text for r in second[:3]] == ["echo: one", "echo: two", "echo: one"]
    assert all(r.cached and r.attempts == 0 for r in second[:3])
    assert not second[3].cached and second[3].status == "server_error"  # failures not cached
    assert len(server.log) == 4  # only the failed request was asked again

    key = cache_key("openai", "scripted-model", ask("two"))
    path = cache.path(key)
    assert path == tmp_path / "cache" / key[:2] / key[2:4] / f"{key}.txt"
    assert path.read_text(encoding="utf-8") == "echo: two"
    assert sorted(p.suffix for p in (tmp_path / "cache").rglob("*.*")) == [".txt", ".txt"]
    assert cache.get("0" * 64) is None
    with pytest.raises(ValueError, match="64 lower-case hex"):
        cache.get("../../etc/passwd")


def test_each_answer_is_cached_as_it_arrives(
    server: ChatServer, api_key: str, tmp_path: Path
) -> None:
    """A batch killed while its slow request still waits keeps the answers it had: each is in
    the cache as soon as it arrives, not when the whole batch is done."""
    cache = ResponseCache(tmp_path / "cache")
    chat = CachedChat(client(server, timeout_s=5.0, max_retries=0), cache)
    batch = [ask("quick"), script("slow")]
    stored_when_heard: dict[int, str | None] = {}

    def heard(index: int, result) -> None:
        stored_when_heard[index] = cache.get(cache_key("openai", "scripted-model", batch[index]))

    results = chat.complete(batch, heard)
    chat.close()
    assert [r.status for r in results] == ["ok", "ok"]
    assert stored_when_heard[0] == "echo: quick"  # before the slow one was answered
    assert server.log[0].user_text.startswith("quick")  # it did finish first


WRITER = """
import sys
from pathlib import Path
from xmr.llm.cache import ResponseCache

folder, writer, rounds, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
cache = ResponseCache(Path(folder))
for _ in range(rounds):
    for key in keys:
        cache.put(key, writer + ":" + "\u00e9" * 100_000)
"""
"""A process that writes every key ``rounds`` times, each time a whole writer-tagged answer."""


def test_cache_entries_stay_whole_under_concurrent_writers(tmp_path: Path) -> None:
    keys = [cache_key("openai", "m", ask(f"row {i}")) for i in range(8)]
    whole = {f"{writer}:" + "é" * 100_000 for writer in range(3)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(w), "15", *keys])
        for w in range(3)
    ]
    reader = ResponseCache(tmp_path)
    reads = 0
    while any(process.poll() is None for process in writers):
        for key in keys:
            text = reader.get(key)
            assert text is None or text in whole  # never a torn entry
            reads += text is not None
    assert [process.wait() for process in writers] == [0, 0, 0]
    assert all(reader.get(key) in whole for key in keys)
    assert not list(tmp_path.rglob("*.tmp"))
    assert reads > 0


# --- the local transformers backend ----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_chat_model(tmp_path_factory.mktemp("tiny-chat-llm"))


def test_hf_chat_answers_each_request_greedily(tiny_chat_model: Path, tmp_path: Path) -> None:
    user = (("user", "list the objects in: a dog on the grass"),)
    batch = [
        ChatRequest(user, max_tokens=3),
        ChatRequest((("user", "a red frisbee"),), max_tokens=6),
        ChatRequest((("system", "be brief"), *user), max_tokens=3),  # the template refuses
        ChatRequest(user, max_tokens=CONTEXT),  # prompt + answer exceed the context
        ChatRequest((("user", "x"),), max_tokens=4),
    ]
    chat = HFChat(str(tiny_chat_model), device="cpu", batch_size=2)
    results = chat.complete(batch)
    assert [r.status for r in results] == ["ok", "ok", "engine_error", "too_large", "ok"]
    assert "no system message" in results[2].error
    assert "exceeds the model's context of 256" in results[3].error
    assert all(isinstance(r.text, str) for r in results)
    assert [r.text for r in chat.complete(batch)] == [r.text for r in results]  # greedy
    chat.close()

    spec = LLMSpec(backend="hf", model=str(tiny_chat_model), cache_dir=tmp_path / "cache")
    cached = create_chat(spec, device="cpu")
    assert isinstance(cached, CachedChat) and cached.name == "hf"
    assert [r.text for r in cached.complete(batch[:2])] == [r.text for r in results[:2]]
    assert all(r.cached for r in cached.complete(batch[:2]))
    cached.close()


def test_hf_chat_refuses_a_missing_model_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        HFChat(str(tmp_path / "no-model"))


# --- the spec (flags) and vLLM ----------------------------------------------------------------


def test_llm_flags_are_checked_with_the_flag_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = LLMSpec(model="gpt-test", url="http://127.0.0.1:8000/v1", cache_dir=Path("rel"))
    assert spec.cache_dir == tmp_path / "rel"
    assert isinstance(create_chat(spec), CachedChat)
    wrong = {
        "--llm must be one of": {"backend": "claude"},
        "--llm-url must be http": {"url": "127.0.0.1:8000"},
        "--llm-url must not carry credentials": {"url": "http://user:pw@host/v1"},
        "--llm-url must be a base URL without a query": {"url": "http://host/v1?key=1"},
        "--llm-in-flight must be >= 1": {"max_in_flight": 0},
        "--llm-timeout must be > 0": {"timeout_s": 0},
        "--llm-device must be": {"device": "tpu"},
        "--llm-runtime-env is not valid JSON": {"runtime_env": "{image"},
    }
    for message, values in wrong.items():
        with pytest.raises(ValueError, match=message):
            LLMSpec(**values)
    with pytest.raises(ValueError, match="--llm-key-env must name") as refused:
        LLMSpec(key_env=KEY)  # the key pasted into the wrong flag is not repeated
    assert KEY not in str(refused.value)
    with pytest.raises(ValueError, match="--llm-model is required with --llm openai"):
        create_chat(LLMSpec())
    oracle = LLMSpec(backend="oracle")
    oracle.check_ready()  # no model to name: ToyWorld's ground truth answers
    assert oracle.reads_images and not spec.reads_images
    with pytest.raises(ValueError, match="--llm oracle is built by the BiAug stages"):
        create_chat(oracle)


def test_vllm_is_refused_here_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # absent, even where it is installed
    with pytest.raises(ImportError, match="--llm-runtime-env") as refused:
        check_vllm()
    assert "vllm serve" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ImportError, match="--llm-runtime-env"):
        LLMSpec(backend="vllm", model="some/model").check_ready()
    with pytest.raises(ImportError, match="--llm-runtime-env"):
        build_vllm_processor("some/model", keep_columns=["key"])
    check_vllm({"image_uri": "registry/ray-llm:latest"})  # its own environment: accepted
    with pytest.raises(ValueError, match="--llm-runtime-env must give"):
        check_vllm({"env_vars": {"A": "1"}})
    with pytest.raises(ValueError, match="reads its answers back from --llm-cache"):
        create_chat(LLMSpec(backend="vllm", model="some/model"))
    with pytest.raises(ValueError, match="--llm-engine-kwargs must be a JSON object"):
        LLMSpec(backend="vllm", engine_kwargs="[1]")


def test_vllm_answers_are_read_back_through_the_cache(tmp_path: Path) -> None:
    """The stages' side of ``--llm vllm``: what the engine pass answered comes from the cache
    (no attempt), what it failed on is an ``engine_error`` with the engine's reason."""
    from xmr.llm.vllm import BACKEND

    answered, failed, unseen = (ChatRequest((("user", q),), max_tokens=4) for q in "abc")
    cache = ResponseCache(tmp_path)
    cache.put(cache_key(BACKEND, "org/m", answered), '["dog"]')
    spec = LLMSpec(backend="vllm", model="org/m", cache_dir=tmp_path)
    chat = create_chat(spec, engine_failures={cache_key(BACKEND, "org/m", failed): "OOM"})
    results = chat.complete([answered, failed, unseen])
    assert results[0] == ChatResult('["dog"]', "ok", "", 0, True)
    assert results[1] == ChatResult("", "engine_error", "OOM", 1)
    assert results[2].status == "engine_error" and "did not answer" in results[2].error


def test_vllm_rows_carry_requests_and_report_failures() -> None:
    request = ChatRequest((("user", "hi"),), max_tokens=5, seed=3)
    fields = vllm_request_fields({"key": "a", "request": request.to_json()})
    assert fields == {
        "messages": [{"role": "user", "content": "hi"}],
        "sampling_params": {"max_tokens": 5, "temperature": 0.0, "seed": 3},
    }
    answered = {"key": "a", "generated_text": "[1]", "__inference_error__": "", "prompt": "hi"}
    failed = {"key": "b", "generated_text": "", "__inference_error__": "ValueError: too\nlong"}
    assert vllm_result_row(answered, ["key"]) == {
        "key": "a", "response": "[1]", "status": "ok", "error": ""
    }  # fmt: skip
    assert vllm_result_row(failed, ["key"]) == {
        "key": "b", "response": "", "status": "engine_error", "error": "ValueError: too long"
    }  # fmt: skip
