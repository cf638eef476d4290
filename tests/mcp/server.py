"""A small, well-behaved MCP server the end-to-end tests of the `mcp` runtime run, built on the
`mcp` package (pip install mcp==2.3.0).

    python3 server.py stdio          # over stdin/stdout
    python3 server.py http PORT      # streamable HTTP at http://127.0.0.1:PORT/mcp

Tools:
- `whoami`: this process's id and its environment (structured content), so a test can see that
  two calls reached one process and what environment the process was given;
- `add(a, b)`: the sum, as text.
"""

import os
import sys
from typing import TypedDict

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentmesh-test-server")


class Identity(TypedDict):
    """Who answered: a process id and its environment."""

    pid: int
    env: dict[str, str]


@server.tool()
def whoami() -> Identity:
    """This server process's id and environment."""
    return {"pid": os.getpid(), "env": dict(os.environ)}


@server.tool(structured_output=False)
def add(a: int, b: int) -> str:
    """The sum of two integers, as text."""
    return str(a + b)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
