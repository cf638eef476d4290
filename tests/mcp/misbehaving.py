"""An MCP server over stdio that misbehaves on request, in plain JSON-RPC (no SDK), for the
end-to-end tests of the `mcp` runtime's failure handling.

    python3 misbehaving.py            # answers initialize, then each tool as below
    python3 misbehaving.py exit       # writes a line to stderr and exits at once (code 1)
    python3 misbehaving.py silent     # never answers initialize

Tools (every call is logged to stderr first):
- `ok`: `{"pid": …}` as structured content;
- `crash`: the process exits (code 3) without answering;
- `hang`: never answers;
- `flood`: answers with one 8 MiB text part;
- `endless`: writes a line that never ends;
- `fail`: a tool error (`isError: true`) saying "the tool failed";
- `rpc_error`: a JSON-RPC error (-32000, "the server refused");
- anything else: a JSON-RPC error "unknown tool".
"""

import json
import os
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(id, result):
    send({"jsonrpc": "2.0", "id": id, "result": result})


def text(value):
    return {"content": [{"type": "text", "text": value}]}


def call(id, name):
    print(f"misbehaving: call of {name}", file=sys.stderr, flush=True)
    if name == "ok":
        pid = {"pid": os.getpid()}
        answer(id, {"content": [{"type": "text", "text": json.dumps(pid)}], "structuredContent": pid})
    elif name == "crash":
        os._exit(3)
    elif name == "hang":
        while True:
            time.sleep(60)
    elif name == "flood":
        answer(id, text("x" * (8 * 1024 * 1024)))
    elif name == "endless":
        chunk = "y" * 65536
        while True:
            sys.stdout.write(chunk)
    elif name == "fail":
        answer(id, {"content": [{"type": "text", "text": "the tool failed"}], "isError": True})
    elif name == "rpc_error":
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "the server refused"}})
    else:
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "serve"
    if mode == "exit":
        print("misbehaving: exiting at start", file=sys.stderr, flush=True)
        sys.exit(1)
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method = message.get("method")
        id = message.get("id")
        if method == "initialize" and mode != "silent":
            answer(id, {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "misbehaving", "version": "1"},
            })
        elif method == "tools/call":
            call(id, message["params"]["name"])
        elif method == "ping":
            answer(id, {})
        elif id is not None and method != "initialize":
            send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
