"""Time from `specfleet serve` (what `make serve` runs) to /health and to the first streamed token of a chat
completion through the official openai client. Usage: python benchmarks/serve_ttft.py [PORT]"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
from openai import OpenAI


def main(port: int = 8011) -> None:
    t0 = time.perf_counter()
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "specfleet"), "serve", "--port",
                               str(port)], env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None:
                sys.exit(server.stdout.read()[-3000:])
            time.sleep(0.5)
        up = time.perf_counter() - t0
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        first, text = None, ""
        for ch in client.chat.completions.create(model="smollm2-135m-instruct", stream=True, max_tokens=24,
                                                 temperature=0, messages=[{"role": "user",
                                                                           "content": "What is the capital of Germany?"}]):
            if ch.choices and ch.choices[0].delta.content:
                first = first or time.perf_counter() - t0
                text += ch.choices[0].delta.content
        print(f"health 200 after {up:.1f} s; first streamed token {first:.1f} s after the command; text: {text!r}")
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8011)
