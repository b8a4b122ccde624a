"""Benchmark: rows/s of the OpenAI-compatible LLM client against a server with a fixed latency.

The scripted chat server of the tests (``tests/chat_server.py``, a real HTTP server on
127.0.0.1, in a thread of this process) answers every request after ``--latency`` seconds;
``OpenAIChat.complete`` sends ``--requests`` distinct requests with 1, 4 and 16 in flight. The
ideal is ``in_flight / latency`` rows/s (every slot busy all the time, zero overhead); the figure
is the measured rate's ratio to it. The server's count of requests open at once checks the
bound. Last, the same batch through ``CachedChat`` twice: the second pass makes no request.

Run from the repository root with ``xmr`` importable:

    python bench/bench_llm.py                      # 64 requests, 200 ms, in flight 1 4 16
    python bench/bench_llm.py --in-flight 1 4 16 64 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from chat_server import ChatServer

from xmr.llm import CachedChat, ChatRequest, OpenAIChat, ResponseCache


def batch(count: int, tag: str) -> list[ChatRequest]:
    """``count`` distinct requests (so a cache could not merge them)."""
    return [
        ChatRequest((("user", f"{tag}: list the objects in caption {i}"),), max_tokens=64)
        for i in range(count)
    ]


def timed_run(
    server: ChatServer, in_flight: int, requests: list[ChatRequest]
) -> tuple[float, float, int]:
    """Wall seconds and CPU seconds (this process: client and server) of one ``complete`` of
    ``requests``, and the most requests the server saw open at once."""
    chat = OpenAIChat(server.url, "bench", max_in_flight=in_flight, timeout_s=30.0, max_retries=0)
    chat.complete(requests[:1])  # connect and warm up outside the timing
    server.max_concurrent = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    results = chat.complete(requests)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    chat.close()
    assert all(result.ok for result in results), [r.error for r in results if not r.ok][:3]
    return seconds, cpu_seconds, server.max_concurrent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2, help="server latency, seconds")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    print(f"{args.requests} requests, server latency {args.latency * 1000:.0f} ms, "
          f"median of {args.repeats} runs")  # fmt: skip
    print("| in flight | wall (s) | rows/s | ideal rows/s | ratio to ideal | max open at server "
          "| CPU ms per request (client + server) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with ChatServer(latency_s=args.latency) as server:
        for in_flight in args.in_flight:
            runs = [
                timed_run(server, in_flight, batch(args.requests, f"{in_flight}/{repeat}"))
                for repeat in range(args.repeats)
            ]
            seconds = statistics.median(run[0] for run in runs)
            rate = args.requests / seconds
            ideal = in_flight / args.latency
            cpu_ms = statistics.median(run[1] for run in runs) / args.requests * 1000
            most_open = max(run[2] for run in runs)
            print(f"| {in_flight} | {seconds:.2f} | {rate:.1f} | {ideal:.1f} | "
                  f"{rate / ideal:.3f} | {most_open} | {cpu_ms:.2f} |")  # fmt: skip

        with tempfile.TemporaryDirectory() as folder:
            chat = CachedChat(
                OpenAIChat(server.url, "bench", max_in_flight=16, max_retries=0),
                ResponseCache(Path(folder)),
            )
            requests = batch(args.requests, "cached")
            chat.complete(requests)
            sent = len(server.log)
            start = time.perf_counter()
            again = chat.complete(requests)
            seconds = time.perf_counter() - start
            chat.close()
            assert all(r.cached for r in again) and len(server.log) == sent
            print(f"\ncached rerun: {args.requests} rows in {seconds * 1000:.1f} ms "
                  f"({args.requests / seconds:,.0f} rows/s), 0 requests")  # fmt: skip


if __name__ == "__main__":
    main()
