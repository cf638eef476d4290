"""The official Python MCP SDK's client timing calls of `trivial` (for `cargo bench --bench mcp`).

    mcp_sdk_client.py WARM_UP CALLS COMMAND [ARG...]

Runs COMMAND as an stdio MCP server, makes WARM_UP calls, then CALLS timed ones, and prints
`{"p50_us": …, "p99_us": …}`.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    warm_up, calls = int(sys.argv[1]), int(sys.argv[2])
    params = StdioServerParameters(command=sys.argv[3], args=sys.argv[4:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            times = []
            for n in range(warm_up + calls):
                started = time.perf_counter()
                result = await session.call_tool("trivial", {})
                elapsed = time.perf_counter() - started
                if result.is_error:
                    raise SystemExit(f"the call failed: {result}")
                if n >= warm_up:
                    times.append(elapsed)
    times.sort()
    rank = lambda p: times[round((len(times) - 1) * p)] * 1e6  # noqa: E731
    print(json.dumps({"p50_us": rank(0.5), "p99_us": rank(0.99)}))


asyncio.run(main())
