"""The Python client against a real daemon (see conftest.py)."""

import asyncio
import threading

import pytest

import sandboxd
from sandboxd import Client, Status
from sandboxd.aio import Client as AsyncClient


def test_run_code_returns_output_status_and_a_verified_bundle(client):
    res = client.run_code("import sys\nprint(6 * 7)\nsys.stdout.buffer.write(b'\\xff')\nprint('oops', file=sys.stderr)")
    assert res.ok and res.status is Status.OK and res.exit_code == 0
    assert res.stdout == b"42\n\xff" and res.text == "42\n\ufffd" and res.stderr.text == "oops\n"
    assert res.started is not None and res.started.run_id == res.run_id and res.duration > 0
    bundle = client.bundle(res.bundle_digest)
    assert bundle.digest == res.bundle_digest and bundle.stdout == b"42\n\xff"
    assert bundle.reproducible["outcome"]["status"] == "OK"
    assert bundle.run["reproducible_digest"] == res.reproducible_digest


def test_a_failing_program_is_a_result_not_an_exception(client):
    res = client.run_code("raise SystemExit(3)")
    assert res.status is Status.NONZERO_EXIT and res.exit_code == 3 and not res.ok
    with pytest.raises(sandboxd.RunFailed) as info:
        res.raise_for_status()
    assert info.value.result is res
    res = client.run_code("import time; time.sleep(30)", timeout=1)
    assert res.status is Status.TIMEOUT


def test_files_env_and_commands(client):
    res = client.run_code(
        "import os; print(open('/input/data/a.txt').read(), os.environ['GREETING'])",
        files={"data/a.txt": "hello"},
        env={"GREETING": "hi"},
    )
    assert res.text == "hello hi\n", res
    res = client.run_command(["sh", "-c", "echo $0 && exit 4", "argv0"])
    assert res.text == "argv0\n" and res.exit_code == 4
    assert client.run_command(shell="echo from a shell").text == "from a shell\n"
    with pytest.raises(ValueError, match="exactly one of argv and shell"):
        client.run_command(["true"], shell="true")


def test_stream_yields_events_as_they_come(client):
    events = list(client.stream_code("import sys; print('a', flush=True); print('b', file=sys.stderr)"))
    assert isinstance(events[0], sandboxd.Started)
    assert isinstance(events[-1], sandboxd.Result)
    out = b"".join(e.data for e in events if isinstance(e, sandboxd.Stdout))
    err = b"".join(e.data for e in events if isinstance(e, sandboxd.Stderr))
    assert out == b"a\n" and err == b"b\n"


def test_a_bad_request_names_its_field(client):
    with pytest.raises(sandboxd.InvalidArgument) as info:
        client.run_code("x", language="cobol")
    assert info.value.field == "language" and "cobol" in info.value.message
    with pytest.raises(sandboxd.InvalidArgument) as info:
        client.run_code("x", files={"../x": "y"})
    assert info.value.field == "files[0].path"
    with pytest.raises(ValueError, match=r"limits: no such limit 'memory' \(did you mean 'memory_bytes'\?\); limits are memory_bytes, "):
        client.run_code("x", limits={"memory": 1})
    with pytest.raises(sandboxd.NotFound):
        client.get_run("0123456789abcdef01234567")


def test_session_keeps_variables_draws_charts_and_holds_files(client):
    with client.session(language="python") as s:
        s.run("x = 41")
        res = s.run("x + 1")
        assert res.value == "42" and res.session is not None and res.session.seq == 2
        res = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
        assert len(res.displays) == 1
        png = res.displays[0].png
        assert png is not None and png.startswith(b"\x89PNG\r\n\x1a\n")
        res = s.run("1 / 0")
        assert res.status is Status.NONZERO_EXIT and res.error is not None and res.error.name == "ZeroDivisionError"

        info = s.files.write("data/in.txt", "some text\n")
        assert info.size == 10
        assert s.files.read("data/in.txt") == b"some text\n"
        assert "data/in.txt" in [f.path for f in s.files.list("data")]
        assert s.run("open('data/in.txt').read()").value == "'some text\\n'"

        fork = s.fork()
        try:
            assert fork.id != s.id and fork.run("x").value == "41"
        finally:
            fork.delete()
    assert client.get_session(s.id).info.state is sandboxd.SessionState.DELETED


def test_detached_run_is_followed_from_offsets_and_cancelled(client):
    handle = client.run_code("import time\nprint('one', flush=True)\ntime.sleep(0.5)\nprint('two')", detach=True)
    assert handle.started is not None and handle.run_id == handle.started.run_id
    res = handle.wait()
    assert res.ok and res.text == "one\ntwo\n"
    tail = b"".join(e.data for e in handle.attach(stdout_offset=4) if isinstance(e, sandboxd.Stdout))
    assert tail == b"two\n"

    long = client.run_code("import time; time.sleep(60)", detach=True)
    long.cancel()
    assert long.wait().status is Status.CANCELLED


def test_idempotency_key_follows_the_first_run(client):
    first = client.run_code("import random; print(random.random())", idempotency_key="py-client-key-1")
    again = client.run_code("import random; print(random.random())", idempotency_key="py-client-key-1")
    assert again.run_id == first.run_id and again.stdout == first.stdout
    with pytest.raises(sandboxd.AlreadyExists):
        client.run_code("print(2)", idempotency_key="py-client-key-1")


def test_busy_refusal_carries_its_details_and_is_retried(client):
    # The daemon runs one task at a time and queues none: while one runs,
    # another is refused as busy.
    hold = client.run_code("import time; time.sleep(60)", detach=True)
    try:
        with Client(retry_within=0) as impatient:
            with pytest.raises(sandboxd.ResourceExhausted) as info:
                impatient.run_code("print(1)")
        err = info.value
        assert err.retry_delay is not None and err.retry_delay > 0
        assert err.quota and err.quota[0].subject == "sandboxd" and err.quota[0].description.startswith("max-queued")

        # A patient client waits, and runs once the slot is free.
        threading.Timer(err.retry_delay / 2, hold.cancel).start()
        with Client(retry_within=30) as patient:
            assert patient.run_code("print(1)").text == "1\n"
    finally:
        hold.cancel()


def test_asyncio_stream_refused_as_busy_is_retried(client):
    hold = client.run_code("import time; time.sleep(60)", detach=True)
    try:
        threading.Timer(1.0, hold.cancel).start()

        async def main():
            async with AsyncClient(retry_within=30) as patient:
                assert (await patient.run_code("print(1)")).text == "1\n"

        asyncio.run(main())
    finally:
        hold.cancel()


def test_tcp_with_a_token_from_a_file_ending_in_a_newline(tcp):
    addr, token_file = tcp
    with Client(addr, token_file=token_file) as c:
        assert c.run_code("print('over tcp')").text == "over tcp\n"
    with Client(addr, token="") as c:
        with pytest.raises(sandboxd.Unauthenticated):
            c.run_code("print(1)")
    with pytest.raises(ValueError, match="the socket needs no TLS"):
        Client("/run/x.sock", tls_ca="/nonexistent")


def test_bundle_that_was_changed_does_not_verify(client):
    res = client.run_code("print('kept')")
    data = client.get_bundle(res.bundle_digest)
    assert sandboxd.verify(data, res.bundle_digest).stdout == b"kept\n"
    with pytest.raises(sandboxd.BundleInvalid, match="digest"):
        sandboxd.verify(data, "sha256:" + "0" * 64)
    with pytest.raises(sandboxd.BundleInvalid):
        sandboxd.verify(data[:-8])


def test_asyncio_client():
    async def main():
        async with AsyncClient() as c:
            res = await c.run_code("print(6 * 7)")
            assert res.text == "42\n"
            kinds = [type(e).__name__ async for e in c.stream_code("print(1)")]
            assert kinds[0] == "Started" and kinds[-1] == "Result" and "Stdout" in kinds
            async with await c.session() as s:
                await s.run("y = 2")
                assert (await s.run("y * 21")).value == "42"
            handle = await c.run_code("print('later')", detach=True)
            assert (await handle.wait()).text == "later\n"

    asyncio.run(main())


def test_inventory_names_languages_and_runtimes(client):
    inv = client.inventory()
    assert inv.languages["python"] == "sandboxd/python"
    assert inv.default_runtime in inv.runtimes and inv.max_limits.timeout > 0


def test_leaving_a_stream_early_cancels_its_run(client):
    events = client.stream_code("import time; print('up', flush=True); time.sleep(60)")
    for ev in events:
        if isinstance(ev, sandboxd.Stdout):
            break
    events.close()
    last = client.list_runs()[0]
    assert client.wait_run(last.run_id).result.status is Status.CANCELLED


def test_a_call_another_daemon_holds_is_made_there_once(tcp):
    # A front daemon of a "cluster" answers every run with the ELSEWHERE
    # redirect to the real daemon's TCP address; the client calls there,
    # with the same token, once.
    from concurrent import futures

    import grpc
    from google.protobuf import any_pb2

    from sandboxd.rpc import error_details_pb2, status_pb2
    from sandboxd.v1 import sandboxd_pb2_grpc

    addr, token_file = tcp
    calls = []

    class Refusal(grpc.Status):
        def __init__(self, code, details, trailing_metadata):
            self.code, self.details, self.trailing_metadata = code, details, trailing_metadata

    class Front(sandboxd_pb2_grpc.SandboxServiceServicer):
        def RunCode(self, request, context):
            calls.append(dict(context.invocation_metadata()))
            info = error_details_pb2.ErrorInfo(
                reason="ELSEWHERE", domain="sandboxd.dev", metadata={"address": addr, "daemon": "real", "kind": "run", "id": "x"}
            )
            detail = any_pb2.Any(type_url="type.googleapis.com/google.rpc.ErrorInfo", value=info.SerializeToString())
            st = status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message="held by real", details=[detail])
            context.abort_with_status(
                Refusal(grpc.StatusCode.FAILED_PRECONDITION, "held by real", (("grpc-status-details-bin", st.SerializeToString()),))
            )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    sandboxd_pb2_grpc.add_SandboxServiceServicer_to_server(Front(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Client(f"127.0.0.1:{port}", token_file=token_file) as c:
            assert c.run_code("print('moved')").text == "moved\n"
        assert len(calls) == 1 and calls[0]["authorization"].startswith("Bearer ")
    finally:
        server.stop(None)


def test_program_calls_the_callers_functions(client):
    def add(a: int, b: int = 0) -> int:
        """Adds two integers."""
        return a + b

    def fails(why: str):
        raise RuntimeError(why)

    deleted = []

    @sandboxd.tool(risk="high", description="Deletes a record.")
    def delete(record: str) -> str:
        deleted.append(record)
        return f"deleted {record}"

    asked = []

    def confirm(tool, arguments):
        asked.append((tool, dict(arguments)))
        return arguments["record"] == "r1"

    code = """
from sandboxd import tools
print(tools.caller.add(a=2, b=40))
print(tools.caller.delete(record="r1"))
try:
    tools.caller.delete(record="r2")
except tools.Declined as e:
    print("declined:", e.tool)
try:
    tools.caller.add(a="two")
except tools.InvalidArguments as e:
    print("invalid:", e.field)
try:
    tools.caller.fails(why="on purpose")
except tools.ToolFailed as e:
    print("failed:", e.message)
print("Adds two integers." in tools.caller.add.__doc__)
"""
    res = client.run_code(code, tools=[add, delete, fails], confirm=confirm)
    assert res.ok, res
    assert res.text == "42\ndeleted r1\ndeclined: caller.delete\ninvalid: a\nfailed: RuntimeError: on purpose\nTrue\n", res.text
    assert deleted == ["r1"] and asked == [("caller.delete", {"record": "r1"}), ("caller.delete", {"record": "r2"})]
    assert res.tool_calls == 5
    # Without a confirm callback, a high-risk call is refused, not made.
    res = client.run_code("from sandboxd import tools\ntry:\n    tools.caller.delete(record='r3')\nexcept tools.NeedsConfirmation:\n    print('asked no one')", tools=[delete])
    assert res.text == "asked no one\n" and deleted == ["r1"]
    with pytest.raises(ValueError, match="detach"):
        client.run_code("print(1)", tools=[add], detach=True)
    with pytest.raises(ValueError, match="risk"):
        sandboxd.tool(add, risk="extreme")


def test_session_calls_name_their_own_tools(client):
    def double(n: int) -> int:
        return 2 * n

    with client.session(language="python") as s:
        first = s.run("from sandboxd import tools\nx = tools.caller.double(n=21)\nprint(x)", tools=[double])
        assert first.text == "42\n" and first.tool_calls == 1, first
        # A command of the session calls them too, from its own process.
        cmd = s.command(shell="python3 -c 'from sandboxd import tools; print(tools.caller.double(n=4))'", tools=[double])
        assert cmd.text == "8\n", cmd
        # A call that names no tools is refused them; the kernel kept x.
        last = s.run("try:\n    tools.caller.double(n=1)\nexcept (tools.Refused, AttributeError):\n    print('refused', x)")
        assert last.text == "refused 42\n", last


def test_asyncio_caller_tools(client):
    async def lookup(key: str) -> dict:
        await asyncio.sleep(0.01)
        return {"key": key, "found": True}

    async def main():
        async with AsyncClient() as c:
            res = await c.run_code("from sandboxd import tools\nprint(tools.caller.lookup(key='k')['found'])", tools=[lookup])
            assert res.text == "True\n", res

    asyncio.run(main())


SUM = "a, b = map(int, input().split())\nprint(a + b)"


def test_evaluate_gives_each_case_its_verdict(client):
    from sandboxd import Case, Verdict

    cases = [Case(stdin="1 2\n", expected="3\n", name="small"), Case(stdin="2 2", expected="5", name="wrong")]
    j = client.evaluate(SUM, cases)
    assert j.verdict is Verdict.WRONG_ANSWER
    assert (j.passed, j.total, j.first_failing, j.score) == (1, 2, 1, 0.5)
    assert [c.verdict for c in j.cases] == [Verdict.ACCEPTED, Verdict.WRONG_ANSWER]
    assert j.cases[1].message == 'line 1: expected "5", got "4"'
    assert j.isolation == "fresh" and j.bundle_digest.startswith("sha256:") and not j.sandbox_error


def test_evaluate_many_reports_progress_and_errors_in_place(client):
    from sandboxd import Case, InvalidArgument, Judgement, Submission, Verdict

    seen = []
    out = client.evaluate_many(
        [
            Submission(code=SUM, cases=[Case(stdin="1 1", expected="2")], id="right"),
            {"code": SUM, "cases": [Case(stdin="1 1")], "id": "no expected"},
            Submission(code="x = ", cases=[Case(stdin="1 1", expected="2")], isolation="shared"),
        ],
        progress=lambda done, total, end: seen.append((done, total)),
    )
    assert isinstance(out[0], Judgement) and out[0].accepted
    assert isinstance(out[1], InvalidArgument) and "cases[0].expected_stdout" in out[1].message
    assert isinstance(out[2], Judgement) and out[2].verdict is Verdict.RUNTIME_ERROR and out[2].isolation == "shared"
    assert seen[-1] == (3, 3) and all(d <= t for d, t in seen)


def test_evaluate_a_humaneval_test_and_a_checker(client):
    from sandboxd import Case, Checker, Verdict

    j = client.evaluate("def add(a, b):\n    return a + b", [Case(test="assert add(2, 3) == 5"), Case(test="assert add(2, 3) == 6")])
    assert [c.verdict for c in j.cases] == [Verdict.ACCEPTED, Verdict.WRONG_ANSWER]
    checker = Checker("import sys\ngot = float(open('/input/output').read())\nsys.exit(0 if abs(got - 0.333) < 1e-3 else 1)")
    j = client.evaluate("print(1 / 3)", [Case(compare="checker")], checker=checker)
    assert j.accepted


def test_asyncio_evaluate():
    import asyncio

    from sandboxd import Case, Verdict
    from sandboxd.aio import Client as AsyncClient

    async def main():
        async with AsyncClient() as c:
            return await c.evaluate(SUM, [Case(stdin="40 2", expected="42")], timeout=10)

    assert asyncio.run(main()).verdict is Verdict.ACCEPTED


def test_background_process_terminal_and_port(client):
    import http.client
    import time
    import urllib.parse

    with client.session(language="python") as s:
        s.files.write("index.html", "<p>served</p>\n")
        server = s.start(["python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"])
        port = s.open_port(8000)
        url = urllib.parse.urlsplit(port.url)
        assert url.hostname == port.token + ".localhost"
        body, status = b"", 0
        for _ in range(300):
            conn = http.client.HTTPConnection("127.0.0.1", url.port, timeout=10)
            conn.request("GET", "/index.html", headers={"Host": url.netloc})
            resp = conn.getresponse()
            status, body = resp.status, resp.read()
            conn.close()
            if status == 200:
                break
            time.sleep(0.1)  # 502 until the server listens
        assert status == 200 and body == b"<p>served</p>\n"
        assert [p.port for p in s.ports()] == [8000]

        # A terminal: python3 -i, typed into and read back.
        repl = s.start(["python3", "-i", "-q"], terminal=(24, 80))
        att = repl.attach()
        att.write("6 * 7\r")
        att.write("exit(3)\r")
        seen = b"".join(data for _, data in att)
        assert b"42" in seen and att.exited is not None and att.exited.exit_code == 3

        server.signal(15)
        assert server.wait().exit_code == 143
        out = server.read()
        assert b"GET /index.html" in out.stderr and out.process.state == "EXITED"
        assert [p.process_id for p in s.processes()] == [server.id, repl.id]


def test_network_is_followed_as_it_happens(client, net_host):
    code = f"import urllib.request; print(urllib.request.urlopen('http://{net_host}/', timeout=10).read().decode())"
    events = list(client.stream_code(code, network=[net_host]))
    result = events[-1]
    assert isinstance(result, sandboxd.Result) and result.status == sandboxd.Status.OK, result
    heard = [e for e in events if isinstance(e, sandboxd.NetworkEvent)]
    host = net_host.split(":")[0]
    assert any(e.kind == "connect" and e.name == host and e.allowed for e in heard), heard
    assert result.network_connections >= 1 and result.network_bytes_in > 0
    info = client.get_run(result.run_id)
    assert [e.index for e in info.network] == list(range(len(info.network)))
    assert any(e.name == host and e.bytes_in > 0 for e in info.network), info.network


def test_a_sessions_network_changes_while_it_lives(client, net_host):
    fetch = f"""
try:
    import urllib.request
    print(urllib.request.urlopen('http://{net_host}/', timeout=10).read().decode())
except Exception as e:
    print("refused:", type(e).__name__)
"""
    with client.session(language="python", network=[net_host]) as s:
        assert s.info.network_rules == (net_host,), s.info
        assert s.run(fetch).stdout.strip() == b"hello from net.test"
        info = s.set_network("none")
        assert info.network_rules == () and s.info is info
        assert s.run(fetch).stdout.startswith(b"refused:")
        assert s.set_network([net_host]).network_rules == (net_host,)
        assert s.run(fetch).stdout.strip() == b"hello from net.test"
        with pytest.raises(sandboxd.PermissionDenied, match="evil.test"):
            s.set_network(["evil.test:443"])
        # The test daemon's backend cannot checkpoint: the refusal says so,
        # and the session goes on.
        with pytest.raises(sandboxd.FailedPrecondition, match="paused"):
            s.pause()
        assert s.run(fetch).stdout.strip() == b"hello from net.test"
