"""A fake GitHub API on loopback for the tests of the action's comment: a
``ThreadingHTTPServer`` on 127.0.0.1 (port 0) that records every request and serves a pull
request's comments two to a page with ``Link`` headers, creates (POST) and updates (PATCH) them,
and answers every request with an error status when told to."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

REPO, PR, TOKEN = "someone/project", 7, "t0ken"
PER_PAGE = 2  # the fake's page size, whatever per_page asks: three others make two pages


class FakeGitHub(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict[str, object]] = []
        self.comments = [{"id": 101, "body": "LGTM"},
                         {"id": 102, "body": "<!-- lrcheck:nightly -->\nthe nightly's"},
                         {"id": 103, "body": "a reviewer's note"}]
        self.refuse: int | None = None  # answer every request with this status

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: FakeGitHub

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _answer(self, status: int, payload: object, link: str | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if link:
            self.send_header("Link", link)
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict[str, object]:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        seen = {"method": self.command, "path": self.path, "body": body,
                "auth": self.headers.get("Authorization"),
                "accept": self.headers.get("Accept")}
        self.server.requests.append(seen)
        return seen

    def do_GET(self) -> None:
        self._record()
        if self.server.refuse:
            return self._answer(self.server.refuse, {"message": "Resource not accessible by "
                                                     "integration"})
        url = urlsplit(self.path)
        if url.path != f"/repos/{REPO}/issues/{PR}/comments":
            return self._answer(404, {"message": "Not Found"})
        page = int(parse_qs(url.query).get("page", ["1"])[0])
        comments = self.server.comments
        link = (f'<{self.server.url}{url.path}?per_page=100&page={page + 1}>; rel="next"'
                if page * PER_PAGE < len(comments) else None)
        self._answer(200, comments[(page - 1) * PER_PAGE:page * PER_PAGE], link)

    def do_POST(self) -> None:
        seen = self._record()
        if self.path != f"/repos/{REPO}/issues/{PR}/comments":
            return self._answer(404, {"message": "Not Found"})
        new = {"id": 200 + len(self.server.comments), "body": seen["body"]["body"]}
        self.server.comments.append(new)
        self._answer(201, {**new, "html_url": f"https://github.test/c/{new['id']}"})

    def do_PATCH(self) -> None:
        seen = self._record()
        number = int(self.path.rsplit("/", 1)[1])
        found = next(c for c in self.server.comments if c["id"] == number)
        found["body"] = seen["body"]["body"]
        self._answer(200, {**found, "html_url": f"https://github.test/c/{number}"})
