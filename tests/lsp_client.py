"""A small Language Server Protocol client for the real yaml-language-server (npm), over stdio.

Enough of the protocol to do what an editor does with our schemas: open a document, read the diagnostics
the server publishes, ask for completions and hover text at a position.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path
from queue import Empty, Queue
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "node_modules" / "yaml-language-server" / "bin" / "yaml-language-server"


def server_command() -> list[str] | None:
    """How to start the server, or None when node or the server (scripts/setup-env.sh installs it) is missing."""
    node = shutil.which("node")
    return [node, str(SERVER), "--stdio"] if node and SERVER.is_file() else None


class YamlLanguageServer:
    """One server process; `schemas` maps a schema file to the globs it applies to (the `yaml.schemas` setting)."""

    def __init__(self, workspace: Path, schemas: dict[Path, list[str]]) -> None:
        command = server_command()
        assert command, "yaml-language-server is not installed"
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, cwd=workspace)
        self._next_id = 0
        self._replies: dict[int, Queue[Any]] = {}
        self._diagnostics: Queue[dict[str, Any]] = Queue()
        self._settings = {"yaml": {"validate": True, "hover": True, "completion": True,
                                   "schemas": {p.as_uri(): globs for p, globs in schemas.items()},
                                   "schemaStore": {"enable": False}}}
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"processId": None, "rootUri": workspace.as_uri(),
                                    "capabilities": {"workspace": {"configuration": True},
                                                     "textDocument": {"hover": {"contentFormat": ["markdown"]},
                                                                      "completion": {"completionItem": {
                                                                          "documentationFormat": ["markdown"]}}}},
                                    "workspaceFolders": [{"uri": workspace.as_uri(), "name": "ws"}]})
        self.notify("initialized", {})
        self.notify("workspace/didChangeConfiguration", {"settings": self._settings})

    # -- wire ----------------------------------------------------------------------------------------
    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self._proc.stdin
        self._proc.stdin.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self._proc.stdin.flush()

    def _read(self) -> None:
        out = self._proc.stdout
        assert out
        while True:
            length = 0
            while (line := out.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line:
                return
            message = json.loads(out.read(length))
            if "id" in message and "method" in message:  # the server asks: settings, or register a capability
                items = message.get("params", {}).get("items", [])
                result = [self._settings.get(i.get("section", ""), None) for i in items] if items else None
                self._send({"id": message["id"], "result": result})
            elif "id" in message:
                self._replies.setdefault(message["id"], Queue()).put(message)
            elif message.get("method") == "textDocument/publishDiagnostics":
                self._diagnostics.put(message["params"])

    def request(self, method: str, params: dict[str, Any], timeout: float = 60) -> Any:
        self._next_id += 1
        ident = self._next_id
        queue = self._replies.setdefault(ident, Queue())
        self._send({"id": ident, "method": method, "params": params})
        reply = queue.get(timeout=timeout)
        assert "error" not in reply, reply["error"]
        return reply.get("result")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._send({"method": method, "params": params})

    # -- what an editor does -------------------------------------------------------------------------
    def open(self, path: Path, text: str | None = None) -> str:
        uri = path.as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "yaml", "version": 1,
            "text": path.read_text(encoding="utf-8") if text is None else text}})
        return uri

    def diagnostics(self, uri: str, timeout: float = 60) -> list[dict[str, Any]]:
        """The diagnostics published for `uri` once the server has judged it (the last of a quick burst)."""
        found: list[dict[str, Any]] | None = None
        wait = timeout
        while True:
            try:
                params = self._diagnostics.get(timeout=wait)
            except Empty:
                assert found is not None, f"no diagnostics for {uri}"
                return found
            if params["uri"] == uri:
                found, wait = params["diagnostics"], 1.5

    def completion(self, uri: str, line: int, col: int) -> list[dict[str, Any]]:
        result = self.request("textDocument/completion", {"textDocument": {"uri": uri},
                                                          "position": {"line": line, "character": col}})
        return result.get("items", []) if isinstance(result, dict) else (result or [])

    def hover(self, uri: str, line: int, col: int) -> str:
        result = self.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                     "position": {"line": line, "character": col}})
        if not result:
            return ""
        contents = result["contents"]
        return contents["value"] if isinstance(contents, dict) else str(contents)

    def close(self) -> None:
        try:
            self.request("shutdown", {}, timeout=10)
            self.notify("exit", {})
            self._proc.wait(timeout=10)
        except Exception:
            self._proc.kill()
            self._proc.wait()
