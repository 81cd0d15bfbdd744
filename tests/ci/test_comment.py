"""``python -m lrcheck.ci.comment`` against a fake GitHub API on loopback (a
``ThreadingHTTPServer`` on 127.0.0.1 that records every request and serves the comments two to a
page, with ``Link`` headers): one comment posted, then updated in place, another workflow's left
alone; the token sent; an event without a pull request skipped; the API's refusal said."""

from __future__ import annotations

import json

import pytest

from lrcheck.ci.comment import MAX_BODY, comment_body, main, marker, pull_request_number
from tests.ci.fake_github import PR, REPO, TOKEN


@pytest.fixture
def actions(tmp_path, monkeypatch, github):
    """The variables of a workflow run on pull request 7, its event file written."""
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": PR,
                                 "pull_request": {"number": PR}}))
    for name, value in {"GITHUB_EVENT_PATH": str(event), "GITHUB_EVENT_NAME": "pull_request",
                        "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": github.url,
                        "GITHUB_TOKEN": TOKEN, "GITHUB_WORKFLOW": "lrcheck"}.items():
        monkeypatch.setenv(name, value)
    return event


def _summary(tmp_path, text="**Verdict: FAIL**\n\n![lr](pair/lr.png)\n[lr](pair/lr.png) · "
             "[docs](https://lrcheck.test/checks)\n"):
    path = tmp_path / "summary.md"
    path.write_text(text)
    return path


def test_posts_one_comment_then_updates_it_leaving_the_others_alone(
        tmp_path, actions, github, capsys):
    summary = _summary(tmp_path)
    assert main([str(summary), "--link", "https://github.test/artifact/9"]) == 0
    first = capsys.readouterr().out
    posted = [r for r in github.requests if r["method"] == "POST"]
    assert len(posted) == 1, github.requests
    body = posted[0]["body"]["body"]
    assert body.startswith("<!-- lrcheck:lrcheck -->\n**Verdict: FAIL**")
    assert "pair/lr.png" not in body and "\nlr · [docs](https://lrcheck.test/checks)" in body
    assert body.endswith("The whole report (report.html, plots): https://github.test/artifact/9")
    assert "lrcheck: posted the comment on pull request #7 https://github.test/c/203" in first
    pages = [r["path"] for r in github.requests if r["method"] == "GET"]
    assert len(pages) == 2 and pages[1].endswith("page=2")  # every page read before posting

    github.requests.clear()
    _summary(tmp_path, "**Verdict: PASS**\n")
    assert main([str(summary)]) == 0
    assert [r["method"] for r in github.requests] == ["GET", "GET", "PATCH"]
    assert github.requests[-1]["path"] == f"/repos/{REPO}/issues/comments/203"
    assert "lrcheck: updated the comment on pull request #7" in capsys.readouterr().out
    bodies = {c["id"]: c["body"] for c in github.comments}
    assert bodies[203] == "<!-- lrcheck:lrcheck -->\n**Verdict: PASS**"
    assert bodies[102] == "<!-- lrcheck:nightly -->\nthe nightly's"
    assert len(bodies) == 4
    assert {r["auth"] for r in github.requests} == {f"Bearer {TOKEN}"}
    assert {r["accept"] for r in github.requests} == {"application/vnd.github+json"}


def test_another_workflow_updates_its_own_comment(tmp_path, actions, github, monkeypatch):
    monkeypatch.setenv("GITHUB_WORKFLOW", "nightly")
    assert main([str(_summary(tmp_path))]) == 0
    assert [r["method"] for r in github.requests] == ["GET", "PATCH"]  # found on page 1
    assert github.requests[-1]["path"].endswith("/issues/comments/102")
    assert github.comments[1]["body"].startswith("<!-- lrcheck:nightly -->\n**Verdict: FAIL**")


def test_an_event_without_a_pull_request_is_skipped_saying_so(
        tmp_path, actions, github, monkeypatch, capsys):
    actions.write_text(json.dumps({"ref": "refs/heads/main", "commits": []}))
    monkeypatch.setenv("GITHUB_EVENT_NAME", "push")
    assert main([str(_summary(tmp_path))]) == 0
    assert capsys.readouterr().out.strip() == (
        "lrcheck: no pull request in this push event: no comment posted")
    assert github.requests == []


def test_the_api_s_refusal_is_said_with_its_message_and_exit_1(
        tmp_path, actions, github, capsys):
    github.refuse = 403
    assert main([str(_summary(tmp_path))]) == 1
    error = capsys.readouterr().err
    assert error.startswith("lrcheck: error: the pull request comment: GET ")
    assert "HTTP 403: Resource not accessible by integration" in error
    assert not [r for r in github.requests if r["method"] != "GET"]


def test_an_api_that_cannot_be_reached_is_exit_1(tmp_path, actions, github, monkeypatch,
                                                  capsys):
    github.shutdown()
    github.server_close()
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    assert main([str(_summary(tmp_path))]) == 1
    assert "lrcheck: error: the pull request comment: GET http://127.0.0.1:" in (
        capsys.readouterr().err)


def test_a_missing_file_or_token_is_exit_2(tmp_path, actions, github, monkeypatch, capsys):
    assert main([str(tmp_path / "absent.md")]) == 2
    assert "absent.md: no such file" in capsys.readouterr().err
    monkeypatch.delenv("GITHUB_TOKEN")
    assert main([str(_summary(tmp_path))]) == 2
    assert "GITHUB_TOKEN not set" in capsys.readouterr().err
    assert github.requests == []


def test_the_pull_request_number_from_each_event():
    assert pull_request_number({"pull_request": {"number": 3}}) == 3
    assert pull_request_number({"issue": {"number": 4, "pull_request": {"url": "x"}}}) == 4
    assert pull_request_number({"issue": {"number": 4}}) is None  # an issue's comment
    assert pull_request_number({"ref": "refs/heads/main"}) is None


def test_the_marker_cannot_end_its_html_comment_early():
    assert marker("lrcheck") == "<!-- lrcheck:lrcheck -->"
    assert marker("a--b > c") == "<!-- lrcheck:a_-b _ c -->"
    assert marker("") == "<!-- lrcheck:lrcheck -->"


def test_a_long_summary_is_cut_to_github_s_limit_saying_so():
    body = comment_body("| row |\n" * 20_000, marker("w"), "https://x.test/a")
    assert len(body) <= MAX_BODY
    assert "(cut here: GitHub's limit on a comment" in body
    assert body.endswith("https://x.test/a") and "| row |\n\n…" in body
    assert comment_body("short", "<!-- m -->") == "<!-- m -->\nshort"


def test_its_help_names_how_it_is_run(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m lrcheck.ci.comment [-h]")
