"""A minimal LSP client: the floor `benches/lsp.rs` compares the `lsp` tool with.

usage: lsp_client.py ROOT FILE LINE CHAR -- SERVER ARGV...

Starts the server, initializes it rooted at ROOT, opens FILE, waits for its first
publishDiagnostics, then asks `textDocument/definition` at LINE/CHAR (0-based) WARM times.
Prints one JSON line: {"start_diag_ms", "definition_ms" (median), "diagnostics", "definition"}.
Nothing but the standard library; it does exactly what the tool does on the wire and no more.
"""

import json
import os
import subprocess
import sys
import time

WARM = int(os.environ.get("WARM", "20"))


def main():
    sep = sys.argv.index("--")
    root, path, line, char = sys.argv[1:sep]
    argv = sys.argv[sep + 1 :]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out, inp = proc.stdout, proc.stdin
    next_id = [0]

    def send(msg):
        msg["jsonrpc"] = "2.0"
        body = json.dumps(msg).encode()
        inp.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        inp.flush()

    def read():
        length = 0
        while True:
            h = out.readline()
            if h in (b"\r\n", b""):
                break
            if h.lower().startswith(b"content-length:"):
                length = int(h.split(b":")[1])
        return json.loads(out.read(length))

    def request(method, params):
        next_id[0] += 1
        rid = next_id[0]
        send({"id": rid, "method": method, "params": params})
        while True:
            m = read()
            if m.get("id") == rid and "method" not in m:
                return m.get("result")
            if "method" in m and "id" in m:
                send({"id": m["id"], "result": None})

    uri_root = "file://" + root
    uri = "file://" + os.path.join(root, path)
    request(
        "initialize",
        {
            "processId": os.getpid(),
            "rootUri": uri_root,
            "workspaceFolders": [{"uri": uri_root, "name": "w"}],
            "capabilities": {"textDocument": {"publishDiagnostics": {"versionSupport": True}}},
        },
    )
    send({"method": "initialized", "params": {}})
    with open(os.path.join(root, path)) as f:
        text = f.read()
    send(
        {
            "method": "textDocument/didOpen",
            "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}},
        }
    )
    while True:
        m = read()
        if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri:
            diagnostics = m["params"]["diagnostics"]
            break
        if "method" in m and "id" in m:
            send({"id": m["id"], "result": None})
    start_diag = time.perf_counter() - t0
    times = []
    definition = None
    for _ in range(WARM):
        t = time.perf_counter()
        definition = request(
            "textDocument/definition",
            {"textDocument": {"uri": uri}, "position": {"line": int(line), "character": int(char)}},
        )
        times.append(time.perf_counter() - t)
    times.sort()
    request("shutdown", None)
    send({"method": "exit"})
    proc.wait(timeout=5)
    print(
        json.dumps(
            {
                "start_diag_ms": start_diag * 1000,
                "definition_ms": times[len(times) // 2] * 1000,
                "diagnostics": len(diagnostics),
                "definition": definition,
            }
        )
    )


if __name__ == "__main__":
    main()
