"""A tiny starlette app served by uvicorn, as vLLM's API server is, for the gateway's tests.

It answers the routes the gateway cares about with the path it saw (`scope["path"]`, which
uvicorn percent-decodes, and `scope["raw_path"]`), so a test can tell what reached the
upstream. Routes are defined without a trailing slash, so starlette's `redirect_slashes`
answers `/v1/models/` with a 307 whose `Location` names this server's own address.

Usage: python app.py  (binds 127.0.0.1 on a free port and prints `PORT <n>` once listening)
"""

import asyncio
import json
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def seen(request: Request) -> dict:
    return {
        "path": request.scope["path"],
        "raw_path": request.scope["raw_path"].decode("latin-1"),
        "method": request.method,
    }


async def completion(request: Request) -> JSONResponse:
    body = await request.body()
    try:
        req = json.loads(body or b"{}")
    except ValueError:
        req = {}
    # Holds the request, so a test can fill a concurrency limit.
    await asyncio.sleep(float(req.get("sleep", 0)))
    out = seen(request)
    out.update(
        {
            "object": "text_completion",
            "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )
    return JSONResponse(out)


async def echo(request: Request) -> JSONResponse:
    return JSONResponse(seen(request))


async def lora(request: Request) -> JSONResponse:
    # vLLM's runtime LoRA management: the gateway must never let a request reach it.
    out = seen(request)
    out["lora_reached"] = True
    return JSONResponse(out)


app = Starlette(
    routes=[
        Route("/v1/chat/completions", completion, methods=["POST"]),
        Route("/v1/completions", completion, methods=["POST"]),
        Route("/v1/models", echo, methods=["GET"]),
        Route("/v1/echo/{rest:path}", echo, methods=["GET", "POST"]),
        Route("/v1/load_lora_adapter", lora, methods=["POST"]),
        Route("/v1/unload_lora_adapter", lora, methods=["POST"]),
        Route("/health", echo, methods=["GET"]),
    ]
)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
