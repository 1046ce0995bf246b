#!/usr/bin/env python3
"""Calls per second through the Python binding beside the same calls made directly over the
daemon's HTTP API with httpx (the same client settings, the same pool, the same JSON parsing
of the answer), at each level of calls in flight.

    python src/python/bench.py [--daemon ADDR] [--home DIR] [--session ID]
        [--tool NAME] [--arguments JSON] [--levels 1,64] [--duration-ms 2000]
        [--warmup-ms 300] [--rounds 5] [--cpu-calls 3000] [--json FILE]

The daemon is found as the binding finds it (`--daemon`, `ALBEDO_DAEMON`, the socket, TCP).
Without `--session` it opens a session of its own (deleted at the end). The default tool is
`everything/echo` (the README's short example); `albedo-mcp-bench --only python` runs this
script against the bench's own minimal stdio server, over TCP and the socket, and merges its
JSON into the bench's records (clients `albedo-python` and `httpx-raw`).

Prints one line per measurement and, last, one JSON document:
`{"tool", "endpoint", "clients": {"albedo-python": {"levels": [...]}, "httpx-raw": {...}},
"overhead_us_per_call_c1"}`, each level `{"concurrency", "calls", "elapsed_s", "p50_us",
"p99_us", "cpu_us", "errors"}` (CPU: this process's, binding or raw).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402

import albedo_mcp  # noqa: E402


def pct(sorted_ns: list[int], q: float) -> float:
    if not sorted_ns:
        return 0.0
    i = min(len(sorted_ns) - 1, int(q * (len(sorted_ns) - 1) + 0.5))
    return sorted_ns[i] / 1000.0


async def measure(
    call: Callable[[], Awaitable[Any]], concurrency: int, duration_s: float, warmup_s: float
) -> dict[str, Any]:
    errors = 0

    async def worker(until: float, lat: list[int] | None) -> int:
        nonlocal errors
        n = 0
        clock = time.perf_counter_ns
        while time.perf_counter() < until:
            t0 = clock()
            try:
                await call()
            except Exception as e:  # noqa: BLE001 - counted, the first one shown
                if errors == 0:
                    print(f"bench.py: a call failed: {type(e).__name__}: {e}", file=sys.stderr)
                errors += 1
            if lat is not None:
                lat.append(clock() - t0)
            n += 1
        return n

    warm_until = time.perf_counter() + warmup_s
    await asyncio.gather(*(worker(warm_until, None) for _ in range(concurrency)))
    errors = 0
    gc.collect()
    lats: list[list[int]] = [[] for _ in range(concurrency)]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    until = t0 + duration_s
    counts = await asyncio.gather(*(worker(until, lats[i]) for i in range(concurrency)))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    all_ns = sorted(x for lat in lats for x in lat)
    calls = sum(counts)
    return {
        "concurrency": concurrency,
        "calls": calls,
        "elapsed_s": elapsed,
        "calls_per_s": calls / elapsed if elapsed > 0 else 0.0,
        "p50_us": pct(all_ns, 0.5),
        "p99_us": pct(all_ns, 0.99),
        "cpu_us": cpu * 1e6,
        "errors": errors,
    }


async def in_process_overhead(tool: str, arguments: Any, calls: int = 3000) -> dict[str, float]:
    """The binding's own CPU per call, without I/O: the same canned answer through httpx's
    in-process transport, once with the raw calls and once through the binding, in turn."""
    answer = json.dumps({"outcome": "ok", "content": [{"type": "text", "text": "hello"}]}).encode()

    def handler(_req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answer, headers={"content-type": "application/json"})

    def client() -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.MockTransport(handler),
            base_url="http://localhost",
            headers={"accept": "application/json", "content-type": "application/json"},
        )

    raw = client()
    mcp = albedo_mcp.McpSession(client(), albedo_mcp.Endpoint("http://localhost"), "s1-bench", owned=False, follow=False)
    path = f"/sessions/s1-bench/tools/{tool}/call"

    async def raw_call() -> Any:
        r = await raw.post(path, content=json.dumps({"arguments": arguments}).encode())
        return json.loads(r.content)

    async def binding_call() -> Any:
        return await mcp.call(tool, arguments)

    async def cpu_per_call(call: Callable[[], Awaitable[Any]]) -> float:
        c0 = time.process_time()
        for _ in range(calls):
            await call()
        return (time.process_time() - c0) / calls * 1e6

    raw_us, bind_us = [], []
    for _ in range(2):
        await cpu_per_call(raw_call)
        await cpu_per_call(binding_call)
    for _ in range(5):
        raw_us.append(await cpu_per_call(raw_call))
        bind_us.append(await cpu_per_call(binding_call))
    await raw.aclose()
    await mcp.aclose()
    diffs = sorted(b - r for b, r in zip(bind_us, raw_us))
    return {
        "raw_us": sorted(raw_us)[2],
        "binding_us": sorted(bind_us)[2],
        "added_us": diffs[2],
    }


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon")
    ap.add_argument("--home")
    ap.add_argument("--session")
    ap.add_argument("--tool", default="everything/echo")
    ap.add_argument("--arguments", default='{"message": "hello"}')
    ap.add_argument("--levels", default="1,64")
    ap.add_argument("--duration-ms", type=int, default=2000)
    ap.add_argument("--warmup-ms", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu-calls", type=int, default=3000, help="calls per round of the in-process measure")
    ap.add_argument("--json")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    arguments = json.loads(a.arguments)
    top = max(levels)
    mcp = await albedo_mcp.connect(
        a.session, daemon=a.daemon, home=a.home, max_connections=max(top, 8), follow=False
    )
    ep = mcp.endpoint
    # The raw client: httpx with the binding's own transport settings and headers.
    headers = {"accept": "application/json", "content-type": "application/json"}
    if ep.token and not ep.uds:
        headers["authorization"] = f"Bearer {ep.token}"
    raw = httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(
            uds=ep.uds,
            verify=ep.verify,
            limits=httpx.Limits(max_connections=max(top, 8), max_keepalive_connections=max(top, 8)),
        ),
        base_url=ep.base_url,
        headers=headers,
        timeout=httpx.Timeout(600.0, connect=10.0, pool=None),
    )
    tool = (await mcp.describe(a.tool)).name
    path = f"/sessions/{mcp.session_id}/tools/{tool}/call"

    async def raw_call() -> Any:
        # What a direct user does: encode the arguments, post, parse the answer.
        r = await raw.post(path, content=json.dumps({"arguments": arguments}).encode())
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
        return json.loads(r.content)

    async def binding_call() -> Any:
        return await mcp.call(tool, arguments)

    clients: dict[str, dict[str, Any]] = {"albedo-python": {"levels": []}, "httpx-raw": {"levels": []}}
    duration, warmup = a.duration_ms / 1000, a.warmup_ms / 1000
    rounds = max(1, a.rounds)
    overhead: float | None = None
    try:
        for c in levels:
            # Raw and binding in turn, `rounds` times (this VM's speed drifts by tens of per
            # cent within seconds); each client's median round is kept, and the overhead is
            # the median of the paired differences of mean time per call.
            runs: dict[str, list[dict[str, Any]]] = {"httpx-raw": [], "albedo-python": []}
            await measure(raw_call, c, 0, warmup)
            await measure(binding_call, c, 0, warmup)
            for _ in range(rounds):
                runs["httpx-raw"].append(await measure(raw_call, c, duration / rounds, 0))
                runs["albedo-python"].append(await measure(binding_call, c, duration / rounds, 0))
            for who, rs in runs.items():
                med = sorted(rs, key=lambda r: r["calls_per_s"])[len(rs) // 2]
                clients[who]["levels"].append(med)
                print(
                    f"  {who:14} c={c:<3} {med['calls_per_s']:9.0f} calls/s  p50 {med['p50_us']:7.0f} µs  "
                    f"p99 {med['p99_us']:7.0f} µs  cpu {med['cpu_us'] / max(med['calls'], 1):6.1f} µs/call"
                    f"{'  errors ' + str(med['errors']) if med['errors'] else ''}",
                    flush=True,
                )
            if c == 1:
                diffs = sorted(
                    1e6 / b["calls_per_s"] - 1e6 / r["calls_per_s"]
                    for b, r in zip(runs["albedo-python"], runs["httpx-raw"])
                    if b["calls_per_s"] > 0 and r["calls_per_s"] > 0
                )
                if diffs:
                    overhead = diffs[len(diffs) // 2]
        cpu_overhead = await in_process_overhead(tool, arguments, a.cpu_calls)
    finally:
        await raw.aclose()
        await mcp.aclose()
    doc = {
        "tool": tool,
        "endpoint": ep.describe(),
        "python": sys.version.split()[0],
        "httpx": httpx.__version__,
        "clients": clients,
        "overhead_us_per_call_c1": overhead,
        "binding_cpu_us_per_call": cpu_overhead,
    }
    if overhead is not None:
        print(f"  the binding adds {overhead:.1f} µs per call at 1 in flight (median of paired rounds)")
    print(
        f"  the binding's own CPU per call (in process, no I/O): {cpu_overhead['binding_us']:.1f} µs "
        f"over {cpu_overhead['raw_us']:.1f} µs for httpx alone: +{cpu_overhead['added_us']:.1f} µs"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=2))
    print(json.dumps(doc, separators=(",", ":")))
    errors = sum(lv["errors"] for cl in clients.values() for lv in cl["levels"])
    return 1 if errors else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONASYNCIODEBUG"):
        print("bench.py: PYTHONASYNCIODEBUG is set; figures are meaningless", file=sys.stderr)
    sys.exit(asyncio.run(main()))
