"""Who may use the console (#31), against a real `ledgermq console` process: a change
comes only from its own pages (CSRF token, Origin), a login guards it, and it will not
serve beyond loopback without one. (No browser needed: what a browser sends, sent.)"""
import base64
import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

NOWHERE = "127.0.0.1:1"  # (a name server that is not there)


@pytest.fixture
def console(tmp_path, dev_once):
    procs = []

    def start(*args):
        log = open(tmp_path / f"console-{len(procs)}.log", "w")
        p = subprocess.Popen([sys.executable, "-m", "ledgermq", "console", "-n",
                              dev_once.namesrv,
                              "--port", "0", "--json", *args], stdout=subprocess.PIPE,
                             stderr=log, text=True)
        procs.append(p)
        line = p.stdout.readline()
        assert line, (tmp_path / f"console-{len(procs) - 1}.log").read_text()
        return json.loads(line)["console"]
    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def call(url, data=None, headers=None):
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def token_of(url, headers=None) -> str:
    status, html = call(url + "/topics", headers=headers)
    marker = 'name="_csrf" value="'
    assert marker in html, (status, html[:500])
    return html.split(marker, 1)[1].split('"', 1)[0]


def test_a_change_needs_the_pages_token_and_its_own_origin(console):
    url = console()
    status, text = call(url + "/topics/Victim/delete", {})
    assert status == 403 and "CSRF token" in text
    status, text = call(url + "/topics/Victim/delete", {"_csrf": "guessed"})
    assert status == 403 and "CSRF token" in text
    token = token_of(url)
    status, text = call(url + "/topics/Victim/delete", {"_csrf": token},
                        {"Origin": "http://evil.example"})
    assert status == 403 and "another site (http://evil.example)" in text
    # the right token from the console's own origin is served: the cluster answers
    # (it has no such topic)
    status, text = call(url + "/topics/Victim/delete", {"_csrf": token}, {"Origin": url})
    assert status == 502 and "TOPIC_NOT_EXIST" in text and "Victim" in text, status


def test_a_login_guards_every_page(console, tmp_path):
    pw = tmp_path / "console.password"
    pw.write_text("s3cret-pass\n")
    url = console("--console-user", "ops", "--console-password-file", str(pw))
    status, _ = call(url + "/topics")
    assert status == 401
    wrong = {"Authorization": "Basic " + base64.b64encode(b"ops:nope").decode()}
    assert call(url + "/topics", headers=wrong)[0] == 401
    right = {"Authorization": "Basic " + base64.b64encode(b"ops:s3cret-pass").decode()}
    status, text = call(url + "/topics", headers=right)
    assert status == 200 and "_csrf" in text


def test_it_will_not_serve_beyond_loopback_without_a_login():
    r = subprocess.run([sys.executable, "-m", "ledgermq", "console", "-n", NOWHERE,
                        "--bind", "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "give it a login" in r.stderr, r.stderr
