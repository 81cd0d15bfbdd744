"""``python -m lrcheck.ci.comment FILE [--link URL]``: FILE (the suite's ``summary.md``, a
pair's ``report.md``) as the pull request's lrcheck comment, posted once and updated in place on
every later run of the same workflow, found by a hidden marker ``<!-- lrcheck:WORKFLOW -->``
(another workflow's comment, or another tool's, is left alone). Links and images relative to the
report folder, which a comment cannot show, become plain text; ``--link`` (the uploaded report)
is added below. Run by lrcheck's GitHub Action after the report is uploaded.

Reads ``GITHUB_EVENT_PATH`` (the pull request's number: ``pull_request``, ``pull_request_target``
and ``issue_comment`` on a pull request; any other event is skipped, saying so),
``GITHUB_REPOSITORY``, ``GITHUB_API_URL`` (default https://api.github.com), ``GITHUB_TOKEN`` and
``GITHUB_WORKFLOW``. Standard library only (urllib). Exit codes: 0 posted, updated or skipped;
1 the API refused or could not be reached (its message said); 2 bad input (a missing file or
variable)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# GitHub's limit on a comment's body, in characters.
MAX_BODY = 65536
# Pages of 100 comments read at most while looking for this workflow's.
MAX_PAGES = 50
LINK_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')
MARKDOWN_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]*)\)")
ABSOLUTE = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|#|/)")


class CommentError(Exception):
    """What stopped the comment: the message said, the exit code returned."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Target:
    """Where the comment goes: the API, the repository (``owner/name``), the pull request."""

    api: str
    repository: str
    number: int
    token: str


def pull_request_number(event: Mapping[str, object]) -> int | None:
    """The pull request an Actions event is about, or None (a push, a schedule, a comment on an
    issue that is not a pull request)."""
    pull = event.get("pull_request")
    if isinstance(pull, dict) and isinstance(pull.get("number"), int):
        return int(pull["number"])
    issue = event.get("issue")
    if isinstance(issue, dict) and issue.get("pull_request") and isinstance(
            issue.get("number"), int):
        return int(issue["number"])
    return None


def marker(workflow: str) -> str:
    """The hidden first line of this workflow's comment: ``<!-- lrcheck:WORKFLOW -->``, the
    name's characters that could end an HTML comment (``--``, ``>``) made ``_``."""
    name = re.sub(r"-(?=-)|[<>\n\r]", "_", workflow.strip()) or "lrcheck"
    return f"<!-- lrcheck:{name} -->"


def comment_body(markdown: str, mark: str, link: str | None = None) -> str:
    """The comment: ``mark``, then ``markdown`` with its relative links made their text and its
    relative images left out, then ``link``; cut to GitHub's limit, saying so."""
    def absolute_only(found: re.Match[str]) -> str:
        image, text, url = found.groups()
        if ABSOLUTE.match(url):
            return found.group(0)
        return "" if image else text

    text = MARKDOWN_LINK.sub(absolute_only, markdown).strip()
    footer = f"\n\n---\nThe whole report (report.html, plots): {link}" if link else ""
    cut = "\n\n… (cut here: GitHub's limit on a comment; the whole summary is in the report)"
    room = MAX_BODY - len(mark) - 1 - len(footer)
    if len(text) > room:
        text = text[:room - len(cut)].rsplit("\n", 1)[0] + cut
    return f"{mark}\n{text}{footer}"


def request(target: Target, method: str, url: str,
            payload: Mapping[str, str] | None = None) -> tuple[object, str | None]:
    """One API call: its JSON answer and the URL of its next page (``Link: rel="next"``); a
    ``CommentError`` with GitHub's own message when it fails."""
    data = None if payload is None else json.dumps(payload).encode()
    call = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {target.token}", "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "lrcheck-action",
        **({"Content-Type": "application/json"} if data is not None else {})})
    try:
        with urllib.request.urlopen(call, timeout=30) as answer:
            body = answer.read()
            following = LINK_NEXT.search(answer.headers.get("Link", ""))
    except urllib.error.HTTPError as exc:
        raise CommentError(f"{method} {url}: HTTP {exc.code}: {_message(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CommentError(f"{method} {url}: {getattr(exc, 'reason', exc)}") from None
    return (json.loads(body) if body else None), following.group(1) if following else None


def _message(exc: urllib.error.HTTPError) -> str:
    """GitHub's ``message`` from an error's body, else the body or the reason."""
    text = exc.read().decode("utf-8", "replace")
    try:
        found = json.loads(text)
    except ValueError:
        return text.strip()[:300] or str(exc.reason)
    return str(found.get("message", text)) if isinstance(found, dict) else text[:300]


def find_comment(target: Target, mark: str) -> int | None:
    """The id of the pull request's comment whose first line is ``mark``, reading every page
    of its comments; None where there is none."""
    url: str | None = (f"{target.api}/repos/{target.repository}/issues/{target.number}"
                       "/comments?per_page=100")
    for _ in range(MAX_PAGES):
        if url is None:
            return None
        page, url = request(target, "GET", url)
        for comment in page if isinstance(page, list) else []:
            if str(comment.get("body") or "").split("\n", 1)[0].strip() == mark:
                return int(comment["id"])
    return None


def post_or_update(target: Target, body: str, mark: str) -> str:
    """This workflow's comment updated to ``body`` where it exists, else posted: the line that
    says which, with the comment's address."""
    found = find_comment(target, mark)
    repo = f"{target.api}/repos/{target.repository}"
    if found is None:
        answer, _ = request(target, "POST", f"{repo}/issues/{target.number}/comments",
                            {"body": body})
        verb = "posted"
    else:
        answer, _ = request(target, "PATCH", f"{repo}/issues/comments/{found}", {"body": body})
        verb = "updated"
    url = answer.get("html_url", "") if isinstance(answer, dict) else ""
    return f"lrcheck: {verb} the comment on pull request #{target.number} {url}".rstrip()


def run(file: Path, link: str | None, env: Mapping[str, str]) -> str:
    """What ``main`` does, with the environment ``env``: the line to print."""
    if not file.is_file():
        raise CommentError(f"{file}: no such file (lrcheck wrote no summary there)", 2)
    event_path = env.get("GITHUB_EVENT_PATH", "")
    try:
        event = json.loads(Path(event_path).read_text(encoding="utf-8")) if event_path else {}
    except (OSError, ValueError) as exc:
        raise CommentError(f"GITHUB_EVENT_PATH {event_path}: {exc}", 2) from None
    number = pull_request_number(event if isinstance(event, dict) else {})
    if number is None:
        return (f"lrcheck: no pull request in this {env.get('GITHUB_EVENT_NAME', '')} event: "
                "no comment posted").replace("  ", " ")
    missing = [name for name in ("GITHUB_REPOSITORY", "GITHUB_TOKEN") if not env.get(name)]
    if missing:
        raise CommentError(f"{' and '.join(missing)} not set: the action passes its "
                           "github-token input as GITHUB_TOKEN", 2)
    target = Target(env.get("GITHUB_API_URL", "").rstrip("/") or "https://api.github.com",
                    env["GITHUB_REPOSITORY"], number, env["GITHUB_TOKEN"])
    mark = marker(env.get("GITHUB_WORKFLOW", ""))
    return post_or_update(target, comment_body(file.read_text(encoding="utf-8"), mark, link),
                          mark)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lrcheck.ci.comment",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="summary.md or report.md")
    parser.add_argument("--link", help="the uploaded report's address, added below")
    args = parser.parse_args(argv)
    try:
        print(run(args.file, args.link or None, os.environ))
    except CommentError as exc:
        print(f"lrcheck: error: the pull request comment: {exc}", file=sys.stderr)
        return exc.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
