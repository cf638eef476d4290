"""An MCP server whose resources are the files of one directory, with resource subscriptions,
built on the `mcp` package's low-level server (pip install mcp==2.3.0). The end-to-end tests of
MCP resource updates as events run it.

    python3 watcher.py DIR            # over stdin/stdout

Tool: `names`, the files' names, as text.

Resources: `file://<DIR>/<name>` for each file in DIR, read as text. `resources/subscribe` to one
watches the file: each change of its size or modification time is sent as
`notifications/resources/updated`. Each subscription is also appended to `DIR/../subscribed`
(one URI per line), so a test knows when changes will be seen. When `DIR/../stop` appears, the
server removes it and exits (code 3): a server that goes away.
"""

import os
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

DIR = os.path.abspath(sys.argv[1])
LOG = os.path.join(os.path.dirname(DIR), "subscribed")
STOP = os.path.join(os.path.dirname(DIR), "stop")

# Subscribed URI -> the file's last seen (size, mtime); the session to notify (over stdio, a
# process has one).
watched: dict[str, tuple[int, int] | None] = {}
sessions = []


def path_of(uri: str) -> str:
    return uri.removeprefix("file://")


def stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_size, st.st_mtime_ns)


def names() -> list[str]:
    return sorted(n for n in os.listdir(DIR) if os.path.isfile(os.path.join(DIR, n)))


async def list_tools(ctx, params):
    schema = {"type": "object", "properties": {}}
    return types.ListToolsResult(
        tools=[types.Tool(name="names", description="The files' names.", input_schema=schema)]
    )


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="\n".join(names()))])


async def list_resources(ctx, params):
    return types.ListResourcesResult(
        resources=[types.Resource(uri=f"file://{DIR}/{n}", name=n) for n in names()]
    )


async def read_resource(ctx, params):
    uri = str(params.uri)
    with open(path_of(uri)) as f:
        text = f.read()
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, text=text, mime_type="text/plain")]
    )


async def subscribe(ctx, params):
    uri = str(params.uri)
    watched[uri] = stamp(path_of(uri))
    sessions[:] = [ctx.session]
    with open(LOG, "a") as f:
        f.write(uri + "\n")
    return types.EmptyResult()


async def unsubscribe(ctx, params):
    watched.pop(str(params.uri), None)
    return types.EmptyResult()


server = Server(
    "agentmesh-test-watcher",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=unsubscribe,
)


async def poll():
    while True:
        await anyio.sleep(0.05)
        if os.path.exists(STOP):
            os.remove(STOP)
            os._exit(3)
        for uri, seen in list(watched.items()):
            now = stamp(path_of(uri))
            if now != seen:
                watched[uri] = now
                for session in sessions:
                    await session.send_resource_updated(uri)


async def main():
    async with stdio_server() as (read_stream, write_stream):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await server.run(read_stream, write_stream, server.create_initialization_options())
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
