"""sluice's hot routes under Granian's RSGI interface, for `benchmarks.servers_ab`: the app
as `sluice serve --workers 1` builds it, each request answered through `answer_whole` (the
edge's hot routes with the whole body at hand, as a Lambda event is answered), its answer
handed to Granian as bytes. Only the hot routes (and `/healthz`, for the benchmark to know it
is up): anything else is a 404 here."""

from typing import Any

from sluice.cli.serve import served_alone

_app = served_alone()


class App:
    def __rsgi_init__(self, loop: Any) -> None:
        return None

    def __rsgi_del__(self, loop: Any) -> None:
        return None

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        body = await protocol()
        if scope.path == "/healthz":
            protocol.response_str(200, [("content-type", "text/plain")], "ok")
            return
        asgi = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": scope.method, "scheme": scope.scheme,
            "path": scope.path, "raw_path": scope.path.encode(), "root_path": "", "query_string": scope.query_string.encode(),
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in scope.headers.items()],
            "client": (scope.client, 0), "server": (scope.server, 0),
        }  # fmt: skip
        response = await _app.answer_whole(asgi, body)
        if response is None:
            protocol.response_str(404, [("content-type", "text/plain")], "not a hot route")
            return
        protocol.response_bytes(response.status_code, [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers], response.body)


app = App()
