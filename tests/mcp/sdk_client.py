"""An MCP client of the official Python SDK (`mcp`), driven by the end-to-end tests.

    sdk_client.py CALLS stdio COMMAND [ARG...]
    sdk_client.py CALLS http URL [TOKEN]

Connects (stdio: runs COMMAND with this process's environment; http: streamable HTTP to URL,
with `Authorization: Bearer TOKEN` when given), lists the tools, makes the calls CALLS names
(a JSON list of `{"name", "arguments"}`), and prints one JSON object: the task id the server's
`initialize` answer names, the tools' names with their input schemas and their descriptions,
and each call's result. A failure to connect prints `{"error": ...}` and exits 3.
"""

import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


@asynccontextmanager
async def transport(kind, rest):
    if kind == "stdio":
        # The SDK passes on only a few variables unless told: the server reads its secrets
        # from the environment.
        params = StdioServerParameters(command=rest[0], args=rest[1:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            yield read, write
    else:
        headers = {"Authorization": f"Bearer {rest[1]}"} if len(rest) > 1 else None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(rest[0], http_client=http) as (read, write):
                yield read, write


async def main():
    calls = json.loads(sys.argv[1])
    async with transport(sys.argv[2], sys.argv[3:]) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            meta = init.meta or {}
            tools = await session.list_tools()
            results = []
            for call in calls:
                result = await session.call_tool(call["name"], call.get("arguments", {}))
                results.append(
                    {
                        "is_error": bool(result.is_error),
                        "text": "".join(c.text for c in result.content if c.type == "text"),
                        "structured": result.structured_content,
                    }
                )
            print(
                json.dumps(
                    {
                        "task_id": meta.get("agentmesh/task_id"),
                        "protocol": init.protocol_version,
                        "tools": {t.name: t.input_schema for t in tools.tools},
                        "descriptions": {t.name: t.description for t in tools.tools},
                        "results": results,
                    }
                )
            )


try:
    asyncio.run(main())
except Exception as e:  # noqa: BLE001 - the test reads what went wrong
    print(json.dumps({"error": repr(e)}))
    sys.exit(3)
